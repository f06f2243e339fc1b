"""A longer simulated upstream for the follow-upstream stream benchmark: 23 commits after the
root of `tests.testing.simulated_upstream`'s kind (its local GitHub, its relabelled nightlies,
its push events), mixing what upstream's `main` lands in two days.

    R    12-01 01:00  nightly 2.16.0.dev20261201 (the installed torch's wheel relabelled)
    c01  py_harmless  `_GLU_MIN_DIM = 1` before `def glu` (the drift of simulated_upstream)
    c02  py_break     glu refuses 1-D input                        breaks glu
    c03  py_harmless  glu passes `dim=` by keyword, on the broken base (glu fails on both sides)
    c04  revert       reverts c02
    c05  docs         docs/source/nn.functional.rst
    c06  py_harmless  softsign's docstring reworded
    c07  test_file    test/test_unary_ufuncs.py (upstream's tests: outside the installed torch)
    c08  py_break     torch/functional.py: cdist's `use_mm_for_euclid_dist` misspelt  breaks cdist
    c09  revert       reverts c08
    c10  cpp          aten/src/ATen/native/SoftMax.cpp
    c11  py_harmless  torch/functional.py: a comment in cartesian_prod
    c12  mixed_break  tanhshrink's sign flipped + aten/src/ATen/native/Activation.cpp  breaks it
    c13  revert       reverts c12's Python half
    c14  noop         an empty commit; nightly 2.16.0.dev20261202 is built from it
    c15  py_harmless  tanhshrink calls `torch.tanh(input)`
    c16  py_break     softsign's parentheses lost: `input / input.abs() + 1`   breaks softsign
    c17  py_harmless  torch/functional.py: block_diag's docstring, on the broken base
    c18  revert       reverts c16
    c19  cpp          aten/src/ATen/native/UnaryOps.cpp
    c20  mixed        a comment in gaussian_nll_loss + aten/src/ATen/native/BinaryOps.cpp
    c21  docs         docs/source/notes/numerical_accuracy.rst
    c22  py_break     glu refuses 1-D input again (a reland)         breaks glu
    c23  revert       reverts c22

`expected` says what a correct run of the push `parent..commit` reports, given the builds the
index holds by then (a build is in the index from the delivery after its commit's on).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.servers.upstream_history import UpstreamHistory
from tests.testing import simulated_upstream as su
from tests.testing.relabel import relabel_wheel

NN_FUNCTIONAL = su.FUNCTIONAL  # torch/nn/functional.py
TORCH_FUNCTIONAL = "torch/functional.py"
UPSTREAM_TEST = "test/test_unary_ufuncs.py"
SECOND_NIGHTLY = "2.16.0.dev20261202"
PY_KINDS = ("py_break", "py_harmless", "revert", "mixed", "mixed_break")

# An original stand-in for upstream's test module: only its path matters to the runs.
_TEST_TEXT = '''"""Unary ufunc tests (simulated upstream test module)."""

import torch


def test_sin_of_zero_is_zero() -> None:
    assert torch.sin(torch.zeros(3)).abs().sum().item() == 0.0
'''


@dataclass(frozen=True)
class StreamCommit:
    """One commit of the stream: its key, kind, message and the ops it breaks (matched
    case-insensitively against a failing variant's subject)."""

    key: str
    kind: str
    message: str
    breaks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expectation:
    """What a correct run of a delivery reports."""

    tested: str  # tested | partial | not_tested
    conclusion: str  # success | neutral | failure
    breaks: tuple[str, ...]
    build: str  # the key of the commit whose nightly the run should be on
    drift_needs_build: bool


@dataclass
class Stream:
    """The history (`upstream`: shas by key, as simulated_upstream's), its commits in order,
    and the nightlies: commit key -> version."""

    upstream: su.Upstream
    commits: tuple[StreamCommit, ...]
    builds: dict[str, str] = field(default_factory=dict)

    def commit(self, key: str) -> StreamCommit:
        return next(c for c in self.commits if c.key == key)

    def parent(self, key: str) -> str:
        keys = ["R", *(c.key for c in self.commits)]
        return keys[keys.index(key) - 1]


Edit = tuple[str, str, str, str]  # path, old text, new text, marker the old text follows
NN, TF = NN_FUNCTIONAL, TORCH_FUNCTIONAL
_GLU_BREAK = (
    (NN, "_GLU_MIN_DIM = 1", "_GLU_MIN_DIM = 2", ""),
    (NN, su._OLD_CHECK, su._NEW_CHECK, ""),
)
_GLU_FIX = tuple((p, new, old, at) for p, old, new, at in reversed(_GLU_BREAK))
_CDIST = (TF, '"use_mm_for_euclid_dist":', '"use_mm_for_euclid_dists":', "")
_TANH = (NN, "return input - input.tanh()", "return input.tanh() - input", "")
_SOFTSIGN = (NN, "return input / (input.abs() + 1)", "return input / input.abs() + 1", "")


def _undo(edit: Edit) -> Edit:
    path, old, new, at = edit
    return path, new, old, at


# key, kind, date (2026-12-), message, edits, build files, ops it breaks
_COMMITS: tuple[tuple[str, str, str, str, tuple[Edit, ...], tuple[str, ...], tuple[str, ...]], ...]
_COMMITS = (
    ("c01", "py_harmless", "01T03", "Name glu's smallest rank",
     ((NN, "\ndef glu(", "\n" + su._DRIFT + "def glu(", ""),), (), ()),
    ("c02", "py_break", "01T05", "glu: refuse 1-D input", _GLU_BREAK, (), ("glu",)),
    ("c03", "py_harmless", "01T07", "glu: pass dim by keyword",
     ((NN, "_nn.glu(input, dim)", "_nn.glu(input, dim=dim)", ""),), (), ()),
    ("c04", "revert", "01T09", 'Revert "glu: refuse 1-D input"', _GLU_FIX, (), ()),
    ("c05", "docs", "01T11", "docs: glu in nn.functional",
     (("docs/source/nn.functional.rst", "", "Non-linear activations\n\n    glu\n", ""),), (), ()),
    ("c06", "py_harmless", "01T13", "softsign: docstring wording",
     ((NN, "Applies element-wise, the", "Applies, element-wise, the", "\ndef softsign("),), (), ()),
    ("c07", "test_file", "01T15", "test_unary_ufuncs: a cos check",
     ((UPSTREAM_TEST, "", "\n\ndef test_cos_of_zero_is_one() -> None:\n"
       "    assert torch.cos(torch.zeros(2)).sum().item() == 2.0\n", ""),), (), ()),
    ("c08", "py_break", "01T17", "cdist: tidy compute_mode checks", (_CDIST,), (), ("cdist",)),
    ("c09", "revert", "01T19", 'Revert "cdist: tidy compute_mode checks"', (_undo(_CDIST),), (),
     ()),
    ("c10", "cpp", "01T21", "[ATen][CPU] softmax: route size-1 last dim to the general kernel",
     (), ("aten/src/ATen/native/SoftMax.cpp",), ()),
    ("c11", "py_harmless", "01T23", "cartesian_prod: say why it wraps",
     ((TF, "# This wrapper exists to support variadic args.", "# A wrapper: variadic arguments.",
       "\ndef cartesian_prod("),), (), ()),
    ("c12", "mixed_break", "02T01", "tanhshrink: fuse with the Activation kernel", (_TANH,),
     ("aten/src/ATen/native/Activation.cpp",), ("tanhshrink",)),
    ("c13", "revert", "02T03", 'Revert the Python half of "tanhshrink: fuse"', (_undo(_TANH),),
     (), ()),
    ("c14", "noop", "02T05", "Empty commit to re-run the nightly", (), (), ()),
    ("c15", "py_harmless", "02T08", "tanhshrink: call torch.tanh",
     ((NN, "return input - input.tanh()", "return input - torch.tanh(input)", ""),), (), ()),
    ("c16", "py_break", "02T10", "softsign: drop redundant parentheses", (_SOFTSIGN,), (),
     ("softsign",)),
    ("c17", "py_harmless", "02T12", "block_diag: docstring",
     ((TF, "matrix from provided tensors.", "matrix from the given tensors.", ""),), (), ()),
    ("c18", "revert", "02T14", 'Revert "softsign: drop redundant parentheses"',
     (_undo(_SOFTSIGN),), (), ()),
    ("c19", "cpp", "02T16", "[ATen] unary ops: vectorize the tail loop", (),
     ("aten/src/ATen/native/UnaryOps.cpp",), ()),
    ("c20", "mixed", "02T18", "gaussian_nll_loss: comment; binary ops: tail loop",
     ((NN, "# Clamp for stability", "# Clamp for numerical stability", ""),),
     ("aten/src/ATen/native/BinaryOps.cpp",), ()),
    ("c21", "docs", "02T20", "docs: numerical accuracy notes",
     (("docs/source/notes/numerical_accuracy.rst", "", "Numerical accuracy\n", ""),), (), ()),
    ("c22", "py_break", "02T22", "Reland glu: refuse 1-D input", _GLU_BREAK, (), ("glu",)),
    ("c23", "revert", "02T23", 'Revert "Reland glu: refuse 1-D input"', _GLU_FIX, (), ()),
)  # fmt: skip


def _apply(text: str | None, old: str, new: str, at: str) -> str:
    """`text` with the first `old` after the marker `at` replaced by `new`; `old` must be
    there once when no marker is given. An empty `old` appends (a new file: `text` None)."""
    if text is None or not old:
        return (text or "") + new
    if not at and text.count(old) != 1:
        raise AssertionError(f"{old!r} is in the text {text.count(old)} times, not once")
    where = text.index(old, text.index(at) if at else 0)
    return text[:where] + new + text[where + len(old) :]


def make_long_history() -> Stream:
    """The history above over the installed torch's real `torch/nn/functional.py` and
    `torch/functional.py` (and a made-up upstream test module)."""
    texts: dict[str, str] = {
        NN: su.installed_text(NN),
        TF: su.installed_text(TF),
        UPSTREAM_TEST: _TEST_TEXT,
    }
    assert "\ndef glu(" in texts[NN] and su._OLD_CHECK in texts[NN], "torch's glu moved"
    history = UpstreamHistory(dict(texts), root_date="2026-12-01T01:00:00Z")
    shas = {"R": history.root}
    commits = []
    for key, kind, day, message, edits, build_files, breaks in _COMMITS:
        changed: dict[str, str | None] = {}
        for path, old, new, at in edits:
            changed[path] = texts[path] = _apply(texts.get(path), old, new, at)
        date = f"2026-12-{day}:00:00Z"
        shas[key] = history.commit(message, date, changed, build_files=build_files)
        commits.append(StreamCommit(key, kind, message, breaks))
    return Stream(
        su.Upstream(history, shas), tuple(commits), {"R": su.NIGHTLY, "c14": SECOND_NIGHTLY}
    )


def make_stream_build(folder: Path, stream: Stream, key: str) -> Path:
    """The nightly built from commit `key`: the installed torch's wheel relabelled, with the
    torch Python files as the history has them there (the C++ commits change no binary)."""
    upstream = stream.upstream
    sha = upstream.shas[key]
    edits: dict[str, str | None] = {}
    if key != "R":
        for path in (NN_FUNCTIONAL, TORCH_FUNCTIONAL):
            edits[path] = upstream.history.text_at(sha, path)
    folder.mkdir(parents=True, exist_ok=True)
    wheel = su.installed_wheel(folder.parent / "installed-wheel")
    return relabel_wheel(wheel, folder, version=stream.builds[key], git_sha=sha, edits=edits)


def push_payload(folder: Path, stream: Stream, key: str) -> dict[str, Any]:
    """The GitHub push payload of `parent..key` (simulated_upstream's push event)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = su.push_event(folder, stream.upstream, stream.parent(key), key)
    payload: dict[str, Any] = json.loads(path.read_text())["payload"]
    return payload


def expected(stream: Stream, key: str, built: tuple[str, ...]) -> Expectation:
    """What a correct run of the push `parent..key` reports when the index holds the
    nightlies of `built` (commit keys)."""
    order = ["R", *(c.key for c in stream.commits)]
    base = order.index(stream.parent(key))
    build = max((b for b in built if order.index(b) <= base), key=order.index)
    drift = order[order.index(build) + 1 : base + 1]
    history = stream.upstream.history
    by_sha = {c.sha: c for c in history.commits}
    drift_cpp = any(by_sha[stream.upstream.shas[k]].build_files for k in drift)
    own = by_sha[stream.upstream.shas[key]]
    torch_py = [p for p in own.changes if p.startswith("torch/") and p.endswith(".py")]
    if own.build_files and not torch_py:
        tested = "not_tested"
    elif own.build_files or drift_cpp:
        tested = "partial"
    else:
        tested = "tested"
    commit = stream.commit(key)
    conclusion = "success" if tested == "tested" else "neutral"
    conclusion = "failure" if commit.breaks else conclusion
    return Expectation(tested, conclusion, commit.breaks, build, drift_cpp)
