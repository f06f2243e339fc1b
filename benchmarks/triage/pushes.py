"""The push events of the triage benchmark's History scenarios (benchmarks/triage_score.py).

    .venv/bin/python benchmarks/triage/pushes.py DIR

writes DIR/push_{g,b,h,c}.json with their sibling .patch: G is the installed torch's sha (a
docs edit), B = G + autograd_batch_of_one.patch (a commit that breaks the backward of ops it
does not name), H = B + glu_int_dim.patch (a harmless commit), C = G + glu_int_dim.patch (the
same harmless commit on G). B, H and C are made-up shas: the torch at B is built by
torch_at.py, H and C are their base with the change applied by the run.
"""

from __future__ import annotations

import hashlib
import json
import sys
import uuid
from pathlib import Path

from workflows.run.on_build import torch_git_sha

HERE = Path(__file__).resolve().parent
DOCS_EDIT = (
    "diff --git a/docs/source/notes/autograd.rst b/docs/source/notes/autograd.rst\n"
    "--- a/docs/source/notes/autograd.rst\n"
    "+++ b/docs/source/notes/autograd.rst\n"
    "@@ -1,3 +1,4 @@\n"
    " .. _autograd-mechanics:\n"
    " \n"
    " Autograd mechanics\n"
    "+==================\n"
)


def made_up_sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()  # noqa: S324 - a name, not a digest


G_PARENT, B, H = (
    made_up_sha("before G"),
    made_up_sha("autograd batch of one"),
    made_up_sha("glu int dim"),
)
C = made_up_sha("glu int dim on G")


def push(out: Path, name: str, before: str, after: str, files: list[str], diff: str) -> None:
    commit = {
        "id": after,
        "message": f"{name}: {', '.join(files)}",
        "timestamp": "2026-12-01T10:00:00Z",
        "added": [],
        "removed": [],
        "modified": files,
        "distinct": True,
        "url": f"https://github.com/pytorch/pytorch/commit/{after}",
    }
    event = {
        "event": "push",
        "delivery_id": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
        "payload": {
            "ref": "refs/heads/main",
            "before": before,
            "after": after,
            "repository": {
                "full_name": "pytorch/pytorch",
                "name": "pytorch",
                "owner": {"login": "pytorch"},
            },
            "commits": [commit],
            "head_commit": commit,
        },
    }
    (out / f"{name}.json").write_text(json.dumps(event, indent=1) + "\n", encoding="utf-8")
    (out / f"{name}.patch").write_text(diff, encoding="utf-8")


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    g = torch_git_sha()
    if not g:
        raise SystemExit("the installed torch names no git sha")
    breaking = (HERE / "autograd_batch_of_one.patch").read_text(encoding="utf-8")
    harmless = (HERE / "glu_int_dim.patch").read_text(encoding="utf-8")
    push(out, "push_g", G_PARENT, g, ["docs/source/notes/autograd.rst"], DOCS_EDIT)
    push(out, "push_b", g, B, ["torch/autograd/__init__.py"], breaking)
    push(out, "push_h", B, H, ["torch/nn/functional.py"], harmless)
    push(out, "push_c", g, C, ["torch/nn/functional.py"], harmless)
    print(f"G {g}\nB {B}\nH {H}\nC {C}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
