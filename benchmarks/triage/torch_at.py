"""A torch standing for an upstream commit that only changes Python files, without a build.

    .venv/bin/python benchmarks/triage/torch_at.py OUT SHA CHANGE.patch
    PYTHONPATH=OUT:. .venv/bin/python -m workflows run ...   # runs on torch at SHA

OUT/torch is the installed torch with the change's files applied (as a run applies a change,
`selector.patches`) and `version.py` naming SHA as its git version: every other file is a
symbolic link to the installed one (the shared libraries included), so the
folder costs a few files. The triage benchmark's runs use it as the torch of an upstream
commit whose base already carries an earlier breaking commit (benchmarks/triage_score.py).
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

from selector.diff import parse_unified_diff
from selector.patches import apply_patch
from workflows.stores.sources import installed_torch


def build(out: Path, sha: str, diff_text: str) -> Path:
    root, _version = installed_torch()
    if root is None:
        raise SystemExit("torch is not installed here")
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise SystemExit(f"{sha!r}: not a 40-digit git sha")
    patches = parse_unified_diff(diff_text, "the change").files
    texts = {p.path: apply_patch((root / p.path).read_text(encoding="utf-8"), p) for p in patches}
    version = (root / "torch/version.py").read_text(encoding="utf-8")
    texts["torch/version.py"] = re.sub(
        r"^git_version = .*$", f"git_version = {sha!r}", version, flags=re.MULTILINE
    )
    # `installed_torch` resolves torch/__init__.py: a copy, so the torch found is this one.
    texts.setdefault("torch/__init__.py", (root / "torch/__init__.py").read_text("utf-8"))
    if out.exists():
        shutil.rmtree(out)
    for rel, text in texts.items():
        _real_dirs(out, root, Path(rel).parent)
        dest = out / rel
        if dest.is_symlink():
            dest.unlink()  # never write through a link into the installed torch
        dest.write_text(text, encoding="utf-8")
    return out


def _real_dirs(out: Path, root: Path, rel_dir: Path) -> None:
    """Make `out/rel_dir` and its parents real folders whose other entries link to `root`'s."""
    parts = rel_dir.parts
    for depth in range(1, len(parts) + 1):
        here = Path(*parts[:depth])
        target = out / here
        if target.is_symlink():
            target.unlink()
        if target.is_dir():
            continue
        target.mkdir(parents=True)
        for entry in (root / here).iterdir():
            if entry.name in ("__pycache__",):
                continue
            link = target / entry.name
            if not link.exists() and not link.is_symlink():
                link.symlink_to(entry)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("sha")
    parser.add_argument("change", type=Path)
    args = parser.parse_args()
    print(build(args.out, args.sha, args.change.read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
