"""A simulated upstream PyTorch for the follow-upstream tests and benchmark: a linear history
served by a local GitHub (`tests.servers.upstream_history`), "nightly" builds made by
relabelling the installed torch's wheel (`tests.testing.relabel`), and push events for its
commits.

    R   2026-12-01 01:00  the nightly 2.16.0.dev20261201 is built from it (the installed torch)
    c1  2026-12-01 15:00  drift: `_GLU_MIN_DIM = 1` before `def glu` (harmless)
    c2  2026-12-02 10:00  glu refuses 1-D input, through `_GLU_MIN_DIM = 2`: breaks glu's variants
    c3  2026-12-02 11:00  reverts c2
    c4  2026-12-02 12:00  a C++ kernel edit (SoftMax.cpp): needs a build
    c5  2026-12-02 13:00  docs only; the nightly 2.16.0.dev20261203 is built from it

c2's hunks hold the drift's line: they apply to the build only over the drift.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.servers.upstream_history import UpstreamGitHubServer, UpstreamHistory
from tests.testing.paths import REPO_ROOT
from tests.testing.relabel import relabel_wheel

REPO = "pytorch/pytorch"
FUNCTIONAL = "torch/nn/functional.py"
# The installed torch's wheel where this machine keeps it; elsewhere `installed_wheel` asks
# pip for it.
WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
NIGHTLY = "2.16.0.dev20261201"
NEXT_NIGHTLY = "2.16.0.dev20261203"
_OLD_CHECK = """    if input.dim() == 0:
        raise RuntimeError(
            "glu does not support scalars because halving size must be even"
        )"""
_NEW_CHECK = """    if input.dim() < _GLU_MIN_DIM:
        raise RuntimeError(
            f"glu expects an input with a batch dimension (2-D or more), got {input.dim()}-D"
        )"""
_DRIFT = "_GLU_MIN_DIM = 1  # upstream drift: the smallest rank glu takes\n\n\n"


@dataclass
class Upstream:
    history: UpstreamHistory
    shas: dict[str, str]
    events: dict[str, Path] = field(default_factory=dict)


def installed_text(path: str) -> str:
    import torch

    return (Path(torch.__file__).parent.parent / path).read_text(encoding="utf-8")


def wheel_text(wheel: Path, path: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(path).decode("utf-8")


def make_history(wheel: Path | None = None) -> Upstream:
    """The history over the installed torch's files, or over those of `wheel` (another torch
    whose build is then the nightly of R)."""
    original = wheel_text(wheel, FUNCTIONAL) if wheel else installed_text(FUNCTIONAL)
    assert "\ndef glu(" in original and _OLD_CHECK in original, "torch's glu moved"
    history = UpstreamHistory({FUNCTIONAL: original}, root_date="2026-12-01T01:00:00Z")
    drifted = original.replace("\ndef glu(", "\n" + _DRIFT + "def glu(", 1)
    broken = drifted.replace("_GLU_MIN_DIM = 1", "_GLU_MIN_DIM = 2", 1).replace(
        _OLD_CHECK, _NEW_CHECK, 1
    )
    shas = {"R": history.root}
    shas["c1"] = history.commit(
        "Name glu's smallest rank", "2026-12-01T15:00:00Z", {FUNCTIONAL: drifted}
    )
    shas["c2"] = history.commit(
        "glu: refuse 1-D input", "2026-12-02T10:00:00Z", {FUNCTIONAL: broken}
    )
    shas["c3"] = history.commit(
        'Revert "glu: refuse 1-D input"', "2026-12-02T11:00:00Z", {FUNCTIONAL: drifted}
    )
    shas["c4"] = history.commit(
        "[ATen][CPU] softmax: route size-1 last dim to the general kernel",
        "2026-12-02T12:00:00Z",
        {},
        build_files=["aten/src/ATen/native/SoftMax.cpp"],
    )
    shas["c5"] = history.commit(
        "docs: glu", "2026-12-02T13:00:00Z", {"docs/source/nn.rst": "glu\n"}
    )
    return Upstream(history, shas)


def installed_wheel(folder: Path) -> Path:
    """The wheel of the installed torch: this machine's copy, else downloaded by pip."""
    if WHEEL.is_file():
        return WHEEL
    from importlib import metadata

    folder.mkdir(parents=True, exist_ok=True)
    wanted = f"torch=={metadata.version('torch')}"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", wanted, "--dest", str(folder)],
        check=True,
    )
    return next(folder.glob("torch-*.whl"))


def make_builds(
    folder: Path, upstream: Upstream, wheel: Path | None = None, version: str = NIGHTLY
) -> list[Path]:
    """The nightly of R: the installed torch's wheel (or `wheel`) relabelled (under a second)."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = wheel or installed_wheel(folder.parent / "installed-wheel")
    return [relabel_wheel(wheel, folder, version=version, git_sha=upstream.shas["R"])]


def make_next_build(folder: Path, upstream: Upstream) -> Path:
    """The next nightly, built from c5: its Python files as the history has them there (the
    drift), its binary the same (the simulated C++ edit of c4 changes nothing it runs)."""
    text = upstream.history.text_at(upstream.shas["c5"], FUNCTIONAL)
    return relabel_wheel(
        installed_wheel(folder.parent / "installed-wheel"),
        folder,
        version=NEXT_NIGHTLY,
        git_sha=upstream.shas["c5"],
        edits={FUNCTIONAL: text},
    )


def push_event(folder: Path, upstream: Upstream, before: str, after: str) -> Path:
    """A GitHub push delivery of `before..after` (the shipped softmax push's shape)."""
    template = json.loads((REPO_ROOT / "examples/events/push_softmax_kernel.json").read_text())
    payload: dict[str, Any] = template["payload"]
    base, head = upstream.shas[before], upstream.shas[after]
    commit = next(c for c in upstream.history.commits if c.sha == head)
    payload.update(before=base, after=head)
    payload["compare"] = f"https://github.com/{REPO}/compare/{base[:12]}...{head[:12]}"
    entry = {**payload["head_commit"], "id": head, "message": commit.message}
    for key in ("added", "removed", "modified"):
        entry[key] = []
    entry["modified"] = sorted(commit.changes)
    payload["commits"] = [entry]
    payload["head_commit"] = entry
    path = folder / f"push_{before}_{after}.json"
    path.write_text(
        json.dumps(
            {"event": "push", "delivery_id": str(uuid.uuid4()), "payload": payload}, indent=1
        )
    )
    upstream.events[f"{before}..{after}"] = path
    return path


def serve(upstream: Upstream) -> UpstreamGitHubServer:
    server = UpstreamGitHubServer().start()
    upstream.history.register(server, REPO)
    return server
