"""The upstream drift as a layer under the change (`change_overlay.prepare_layer`): the drift's
Python files applied to the build's files, the change's hunks over the drift's texts, each
side of the A/B importing its own torch in a real subprocess (the small `torch` of
test_change_overlay stands in for a build's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workflows.runner.test_change_overlay import run_python, site  # noqa: F401 - fixture
from workflows.runner.change_overlay import ChangeError, prepare, prepare_layer

DRIFT = """\
--- a/torch/nn/functional.py
+++ b/torch/nn/functional.py
@@ -1,3 +1,6 @@
+MIN_DIM = 1  # upstream drift
+
+
 def glu(x):
     if x == 0:
         raise RuntimeError("no scalars")
--- a/torch/_helpers.py
+++ /dev/null
@@ -1,2 +0,0 @@
-def helper():
-    return 'old helper'
"""
# Made against the base (the drift applied): its hunk holds the drift's line.
CHANGE = """\
--- a/torch/nn/functional.py
+++ b/torch/nn/functional.py
@@ -1,6 +1,6 @@
-MIN_DIM = 1  # upstream drift
+MIN_DIM = 2  # upstream drift
_
_
 def glu(x):
     if x == 0:
         raise RuntimeError("no scalars")
""".replace("_\n", " \n")  # two context lines that are blank (a space each)
READ = "import torch.nn.functional as F; print(F.MIN_DIM)"


def on(folder: Path) -> dict[str, str]:
    """The environment a test process of the small torch (in `folder`) inherits."""
    return {"PYTHONPATH": str(folder)}


def test_the_change_applies_over_the_drift_and_each_side_imports_its_own_torch(
    site: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    drift, layer = prepare_layer(DRIFT, site, source="drift", strict=False, cache_dir=tmp_path)
    assert {f.path for f in drift.applied} == {"torch/nn/functional.py", "torch/_helpers.py"}
    change = prepare(CHANGE, site, source="change", cache_dir=tmp_path, under=layer)
    assert [f.path for f in change.applied] == ["torch/nn/functional.py"]
    assert change.folder != drift.folder

    base_side = run_python(site, drift.env(on(site)), READ + "\nimport torch._helpers")
    assert base_side.stdout.strip() == "1"
    assert "ModuleNotFoundError" in base_side.stderr  # the drift removed it
    changed_side = run_python(site, change.env(on(site)), READ + "\nimport torch._helpers")
    assert changed_side.stdout.strip() == "2"
    assert "ModuleNotFoundError" in changed_side.stderr  # the drift is under the change too
    untouched = run_python(
        site, {}, "import torch.nn.functional as F; print(hasattr(F, 'MIN_DIM'))"
    )
    assert untouched.stdout.strip() == "False"  # the build's files are never written


def test_without_the_drift_the_change_does_not_apply(site: Path, tmp_path: Path) -> None:  # noqa: F811
    with pytest.raises(ChangeError, match="functional.py"):
        prepare(CHANGE, site, source="change", cache_dir=tmp_path)
    loose = prepare(CHANGE, site, source="change", strict=False, cache_dir=tmp_path)
    assert [f.path for f in loose.not_applied] == ["torch/nn/functional.py"]


def test_a_module_the_drift_removed_cannot_be_changed_and_a_drift_alone_still_runs(
    site: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    _drift, layer = prepare_layer(DRIFT, site, source="drift", strict=False, cache_dir=tmp_path)
    edit = (
        "--- a/torch/_helpers.py\n+++ b/torch/_helpers.py\n@@ -1,2 +1,2 @@\n"
        " def helper():\n-    return 'old helper'\n+    return 'new helper'\n"
    )
    change = prepare(edit, site, source="change", strict=False, cache_dir=tmp_path, under=layer)
    assert [f.path for f in change.not_applied] == ["torch/_helpers.py"]
    assert "removed by the upstream drift" in change.not_applied[0].why
    # Nothing of the change applies, but its side still imports the base (the drift).
    assert run_python(site, change.env(on(site)), READ).stdout.strip() == "1"
