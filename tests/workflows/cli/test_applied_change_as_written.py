"""A diff is applied as written, through the CLI as a user types it: a file given in several
sections (commits of `git log -p --reverse`, diffs put together) gets every section, in
order, and the selector chooses on the change they make together; a file named by a path
that is not normalized (`torch/../torch/...`, `./torch//...`) is that file; a name outside
the tree, or sections in an order no text can follow, are refused (exit 2) before anything
is recorded."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

from tests.testing.cli import cli
from tests.testing.paths import GLU_PATCH, GLU_SPEC
from tests.workflows.cli.test_applied_change_run import GLU, run

FUNCTIONAL = "torch/nn/functional.py"
HEADER = "diff --git a/{0} b/{0}\n--- a/{0}\n+++ b/{0}\n"
# The shipped glu edit (examples/changes/glu_batch_check.patch) as two commits: the check,
# then its message; the second's context holds lines only the first wrote.
THE_CHECK = """\
@@ -1802,9 +1802,10 @@ def glu(input: Tensor, dim: int = -1) -> Tensor:
     \"\"\"
     if has_torch_function_unary(input):
         return handle_torch_function(glu, (input,), input, dim=dim)
-    if input.dim() == 0:
+    if input.dim() < 2:
+        # A 1-D input has no batch dimension: say so here rather than in the kernel.
         raise RuntimeError(
             "glu does not support scalars because halving size must be even"
         )
     return torch._C._nn.glu(input, dim)

"""
THE_MESSAGE = """\
@@ -1802,10 +1802,10 @@ def glu(input: Tensor, dim: int = -1) -> Tensor:
     \"\"\"
     if has_torch_function_unary(input):
         return handle_torch_function(glu, (input,), input, dim=dim)
     if input.dim() < 2:
         # A 1-D input has no batch dimension: say so here rather than in the kernel.
         raise RuntimeError(
-            "glu does not support scalars because halving size must be even"
+            f"glu expects an input with a batch dimension (2-D or more), got {input.dim()}-D"
         )
     return torch._C._nn.glu(input, dim)

"""


def a_comment_on_top() -> str:
    """A harmless hunk: a comment after the installed file's first three lines."""
    spec = importlib.util.find_spec("torch")  # found, not imported
    assert spec is not None and spec.submodule_search_locations
    installed = Path(spec.submodule_search_locations[0]) / "nn" / "functional.py"
    top = installed.read_text(encoding="utf-8").splitlines()[:3]
    return "@@ -1,3 +1,4 @@\n" + "".join(f" {line}\n" for line in top) + "+# tried here\n"


@pytest.mark.long
def test_a_files_sections_all_apply_in_order_under_one_path_and_the_break_is_red(
    glu_inventory: Path, tmp_path: Path
) -> None:
    """The glu break in two commits, the second named `torch/../torch/...`, then a harmless
    last section named `./torch//...`: once only the last section took effect ("change
    TESTED", nothing selected, exit 0); now glu's variant is selected and fails, new."""
    assert THE_CHECK.splitlines()[1:4] == GLU_PATCH.read_text().splitlines()[5:8]
    diff = tmp_path / "two-commits.patch"
    diff.write_text(
        "commit 1\n\n    glu: check the batch dimension\n\n"
        + HEADER.format(FUNCTIONAL)
        + THE_CHECK
        + "commit 2\n\n    glu: say what is wrong\n\n"
        + HEADER.format("torch/../torch/nn/functional.py")
        + THE_MESSAGE
        + "commit 3\n\n    a comment\n\n"
        + HEADER.format("./torch//nn/functional.py")
        + a_comment_on_top()
    )
    done, record = run(diff, glu_inventory, tmp_path / "out", tmp_path / "state")
    assert done.returncode == 1, done.stdout + done.stderr
    change = record["environment"]["change"]
    assert [(f["path"], f["why"]) for f in change["applied"]] == [
        (FUNCTIONAL, "3 hunks in 3 sections, applied in the diff's order")
    ]
    assert record["environment"]["tested"] == "tested"
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert not plan["fallback"]  # chosen for glu's edit, not a blind full run
    assert GLU in {s["id"] for s in plan["selected"]}, plan["selected"]
    assert plan["change"]["files"] == 1
    result = {r["id"]: r for r in record["results"]}[GLU]
    assert result["classification"] == "new" and result["base_status"] == "passed"
    assert "got 1-D" in result["message"]  # the second section's message: it applied
    assert f"applied: {FUNCTIONAL}" in done.stdout
    assert "torch/../" not in done.stdout and "./torch" not in done.stdout


def _patch(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "in.patch"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("command", "text", "says"),
    [
        (
            "run",
            GLU_PATCH.read_text().replace("/torch/nn/functional.py", "/torch/../../x.py"),
            r"in.patch:1: 'torch/../../x.py' leads out of the repository",
        ),
        (
            "select",
            GLU_PATCH.read_text().replace("a/torch/nn/", "a/./torch/../../nn/"),
            r"in.patch:1: './torch/../../nn/functional.py' leads out of the repository",
        ),
        (
            "run",
            GLU_PATCH.read_text()
            .replace("--- a/torch/nn/", "--- /usr/src/torch/nn/")
            .replace("diff --git a/torch/nn/functional.py b/torch/nn/functional.py\n", ""),
            r"in.patch:2: '/usr/src/torch/nn/functional.py' is an absolute path",
        ),
        (
            # `git log -p` prints the newest commit first: the message's section cannot
            # apply to the installed file, the check's has not been applied yet.
            "run",
            HEADER.format(FUNCTIONAL) + THE_MESSAGE + HEADER.format(FUNCTIONAL) + THE_CHECK,
            r"the change cannot be applied: .*in.patch: torch/nn/functional.py: section 1 "
            r"\(line 1 of the diff\), hunk 1 .*`git log -p --reverse`",
        ),
        (
            "run",
            HEADER.format(FUNCTIONAL).replace("--- a/", "deleted file mode 100644\n--- a/")
            + "@@ -1 +0,0 @@\n-x\n"
            + HEADER.format(FUNCTIONAL)
            + THE_CHECK,
            r"in.patch:7: torch/nn/functional.py: the section here changes it, but it was "
            r"deleted \(the section at line 1\)",
        ),
    ],
    ids=["run-escapes", "select-escapes", "run-absolute", "run-newest-first", "run-after-delete"],
)
def test_a_diff_that_cannot_be_applied_as_written_is_refused(
    command: str, text: str, says: str, glu_inventory: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}
    out = tmp_path / "out"
    args = ["--out", str(out), "--specs", str(GLU_SPEC)] if command == "run" else []
    done = cli(
        command, "--diff", str(_patch(tmp_path, text)), "--inventory", str(glu_inventory),
        *args, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("spyre-ci: error: ") and re.search(says, line), line
    assert not out.exists() and list(state.iterdir()) == []
