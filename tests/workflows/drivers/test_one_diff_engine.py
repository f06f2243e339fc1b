"""The change overlay, the bisect, the old-source check and the Scout ask one engine
(`selector.patches`) whether a hunk applies and where: for hostile files over a small
installed torch and for the shipped diffs over the installed one, the text the overlay writes
is the text the selector plans on, and a file one refuses the other does not place."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import selector.patches
from selector import ChangeSet
from selector.definitions import locate
from selector.diff import FilePatch, parse_unified_diff, split_lines
from selector.patches import MAX_OFFSET, patched
from tests.selector.test_patches import SHIPPED
from workflows.drivers.bisect.window import Commit, classify, replayable_prefix, state_diff
from workflows.runner.change_overlay import AppliedChange, prepare
from workflows.runner.change_overlay.overlay_files import ACTIVATION_FILE
from workflows.stores.sources import GitHubSources, installed_torch, with_old_sources

PATH = "torch/nn/functional.py"
FUNCTIONAL = (
    "def glu(x):\n"
    "    if x == 0:\n"
    '        raise RuntimeError("no scalars")\n'
    "    return x * 2\n"
    "\n"
    "\n"
    "def keep():\n"
    '    return "kept"\n'
)
EDIT = FUNCTIONAL.replace("x == 0", "x <= 1")
NO_NEWLINE = "\\ No newline at end of file\n"


def _diff(old: str, new: str, *, n: int = 3) -> str:
    body = difflib.unified_diff(
        split_lines(old)[0], split_lines(new)[0], f"a/{PATH}", f"b/{PATH}", lineterm="", n=n
    )
    return "\n".join([f"diff --git a/{PATH} b/{PATH}", *body]) + "\n"


def _pad(count: int) -> str:
    return "".join(f"# upstream line {i}\n" for i in range(count))


_SYMMETRIC = "def glu(x):\n    if x == 0:\n        return 0\n"
# (installed text, or None: not installed; the diff), one file each.
HOSTILE: dict[str, tuple[bytes | None, str]] = {
    "exact": (FUNCTIONAL.encode(), _diff(FUNCTIONAL, EDIT)),
    "moved": ((_pad(9) + FUNCTIONAL).encode(), _diff(FUNCTIONAL, EDIT)),
    "beyond the offset": ((_pad(MAX_OFFSET + 1) + FUNCTIONAL).encode(), _diff(FUNCTIONAL, EDIT)),
    "crlf file": (FUNCTIONAL.replace("\n", "\r\n").encode(), _diff(FUNCTIONAL, EDIT)),
    "trailing white space": (
        FUNCTIONAL.replace("    return x * 2\n", "    return x * 2  \n").encode(),
        _diff(FUNCTIONAL, EDIT),
    ),
    "a context twice, equally near": (
        # its lines at lines 3 and 9, both 3 lines from line 6, where the header puts them
        ("# a\n" * 2 + _SYMMETRIC + "# b\n" * 3 + _SYMMETRIC).encode(),
        _diff("# a\n" * 5 + _SYMMETRIC, "# a\n" * 5 + _SYMMETRIC.replace("0:", "1:"), n=1),
    ),
    "no newline at the end": (  # as git prints it: a marker after each side's last line
        FUNCTIONAL.rstrip("\n").encode(),
        f"diff --git a/{PATH} b/{PATH}\n--- a/{PATH}\n+++ b/{PATH}\n@@ -7,2 +7,2 @@\n"
        f' def keep():\n-    return "kept"\n{NO_NEWLINE}+    return "kept!"\n{NO_NEWLINE}',
    ),
    "a form feed in a line": (
        FUNCTIONAL.replace("def keep", "\x0c\ndef keep").encode(),
        _diff(
            FUNCTIONAL.replace("def keep", "\x0c\ndef keep"),
            FUNCTIONAL.replace("def keep", "\x0c\ndef keep").replace("kept", "k\x0cept"),
        ),
    ),
    "a cut hunk": (FUNCTIONAL.encode(), "\n".join(_diff(FUNCTIONAL, EDIT).split("\n")[:-4])),
    "a file that is not there": (None, _diff(FUNCTIONAL, EDIT)),
    "an empty file": (b"", _diff(FUNCTIONAL, EDIT)),
}


class _NoGitHub:
    """A GitHub that has no file: with it, the installed file is kept only if it fits."""

    def file_at(self, repo: str, path: str, ref: str, max_bytes: int = 0) -> str | None:
        return None


def _overlay_text(folder: str, path: str) -> str:
    activation = json.loads((Path(folder) / ACTIVATION_FILE).read_text("utf-8"))
    (module,) = [m for m in activation["modules"] if m["origin"].endswith(path)]
    return Path(module["source"]).read_bytes().decode("utf-8")


def _commit(diff: str) -> Commit:
    """The commit `diff` is, as GitHub's compare lists it (each file's hunks alone)."""
    hunks = diff.split("\n@@", 1)[1] if "\n@@" in diff else ""
    entry = {"filename": PATH, "status": "modified", "patch": "@@" + hunks}
    return classify("1" * 40, "a change", "someone", [entry])


def _replayed(diff: str, root: Path) -> str | None:
    """The bisect's text of PATH after the commit `diff` is, None when it is not replayed."""
    (patch,) = parse_unified_diff(diff).files
    commit = _commit(diff)
    if replayable_prefix([commit], root) != (1, ""):
        return None
    point = state_diff([commit], 1, root)
    installed = (root / PATH).read_text(encoding="utf-8")
    if not point:
        return installed
    (change,) = parse_unified_diff(point).files
    done = patched(installed, change)
    assert done is not None and patch.path == change.path
    return done.text


@pytest.mark.parametrize("case", list(HOSTILE))
def test_the_overlay_writes_what_the_selector_places_and_both_refuse_alike(
    case: str, tmp_path: Path
) -> None:
    installed, diff = HOSTILE[case]
    site = tmp_path / "site"
    (site / "torch" / "nn").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch" / "nn" / "__init__.py").write_text("")
    if installed is not None:
        (site / PATH).write_bytes(installed)
    (patch,) = parse_unified_diff(diff).files
    # What every side reads of the installed file (universal newlines), the selector's answer.
    text = (site / PATH).read_text(encoding="utf-8") if installed is not None else None
    answer = patched(text, patch) if text is not None else None

    change = prepare(diff, site, strict=False, cache_dir=tmp_path / "c")
    if answer is None:
        assert change.state == "not_applied", change.to_json()
        assert ("does not apply" in change.not_applied[0].why) == (text is not None)
    else:
        assert change.state == "applied" and not change.broken
        assert _overlay_text(change.folder, PATH) == answer.text

    assert _replayed(diff, site) == (answer.text if answer else None)

    selected = ChangeSet.from_diff(diff, base_sha="0" * 40)
    github = GitHubSources(_NoGitHub(), tmp_path / "github")
    sources = with_old_sources(selected, root=site, github=github).sources
    assert (PATH in sources) == (answer is not None)
    if text is not None and text.strip():
        assert (locate(patch, text) is None) == (answer is None)


EXPECTED = {  # which hostile files apply: the cases say what they are about
    "exact": True,
    "moved": True,
    "beyond the offset": False,
    "crlf file": True,
    "trailing white space": False,
    "a context twice, equally near": False,
    "no newline at the end": True,
    "a form feed in a line": True,
    "a cut hunk": False,
    "a file that is not there": False,
    "an empty file": False,
}


def test_the_hostile_cases_are_what_they_say() -> None:
    answers = {}
    for case, (installed, diff) in HOSTILE.items():
        (patch,) = parse_unified_diff(diff).files
        text = installed.decode().replace("\r\n", "\n") if installed is not None else None
        answers[case] = text is not None and patched(text, patch) is not None
    assert answers == EXPECTED
    (cut,) = parse_unified_diff(HOSTILE["a cut hunk"][1]).files
    assert parse_unified_diff(HOSTILE["a cut hunk"][1]).truncated and cut.hunks
    (marked,) = parse_unified_diff(HOSTILE["no newline at the end"][1]).files
    done = patched(FUNCTIONAL.rstrip("\n"), marked)
    assert done is not None and done.text.endswith('return "kept!"')


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths `selector.patches` applied hunks of, call by call."""
    seen: list[str] = []
    real: Callable[..., Any] = selector.patches._apply

    def spy(text: str, hunks: Any, named: Any) -> Any:
        seen.append(named.patch.path)
        return real(text, hunks, named)

    monkeypatch.setattr(selector.patches, "_apply", spy)
    yield seen


def test_every_user_of_a_diff_applies_it_with_the_one_engine(
    calls: list[str], tmp_path: Path
) -> None:
    site = tmp_path / "site"
    (site / "torch" / "nn").mkdir(parents=True)
    (site / PATH).write_text(FUNCTIONAL)
    diff = _diff(FUNCTIONAL, EDIT)
    (patch,) = parse_unified_diff(diff).files
    users: dict[str, Callable[[], object]] = {
        "overlay": lambda: prepare(diff, site, cache_dir=tmp_path / "c"),
        "bisect": lambda: replayable_prefix([_commit(diff)], site),
        "old sources": lambda: with_old_sources(
            ChangeSet.from_diff(diff, base_sha="0" * 40),
            root=site,
            github=GitHubSources(_NoGitHub(), tmp_path / "github"),
        ),
        "scout": lambda: locate(patch, FUNCTIONAL),
    }
    for user, run in users.items():
        calls.clear()
        run()
        assert PATH in calls, f"the {user} applies hunks without selector.patches"


def _shipped_files() -> Iterator[tuple[str, str, FilePatch]]:
    for name, diff in SHIPPED:
        for patch in parse_unified_diff(diff, name).files:
            if patch.path.endswith(".py") and patch.path.startswith("torch/") and patch.hunks:
                yield name, diff, patch


@pytest.mark.long  # a prepared overlay per shipped diff (compiling the OpInfo database): 14 s
def test_the_shipped_diffs_are_applied_by_the_overlay_as_the_selector_places_them(
    tmp_path: Path,
) -> None:
    root = installed_torch()[0]
    if root is None:
        pytest.skip("torch is not installed")
    checked = refused = 0
    prepared: dict[str, AppliedChange] = {}
    for name, diff, patch in _shipped_files():
        text = (root / patch.path).read_text(encoding="utf-8")
        answer = patched(text, patch)
        if name not in prepared:
            prepared[name] = prepare(diff, root, strict=False, cache_dir=tmp_path / "c")
        change = prepared[name]
        if answer is None:
            refused += 1
            assert patch.path in [f.path for f in change.not_applied], name
            continue
        checked += 1
        assert patch.path in [f.path for f in change.applied], name
        assert _overlay_text(change.folder, patch.path) == answer.text, name
        assert (locate(patch, text) is None) is False, name
    assert checked >= 30, (checked, refused)
