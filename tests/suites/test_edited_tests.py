"""A change's edited upstream test files are never imported by a warm runner's zygote: its
`preload` leaves every file suite over them (or over a file beside them) to each test
process, which imports them where a cold one would (`$SPYRE_CI_EDITED_TESTS`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suites.loader import EDITED_TESTS_VAR, edited_tests, load_spec, reuses_any
from tests.testing.paths import REPO_ROOT

UPSTREAM_LIKE = REPO_ROOT / "tests" / "suites" / "upstream_like"
OPS = UPSTREAM_LIKE / "test" / "test_tiny_ops.py"


def test_a_suite_reuses_an_edited_file_or_one_beside_it(tmp_path: Path) -> None:
    spec = load_spec(UPSTREAM_LIKE / "tiny.yaml")
    env = {"TORCH_ROOT": str(UPSTREAM_LIKE)}
    assert reuses_any(spec, edited_tests({EDITED_TESTS_VAR: str(OPS)}), env)
    # A sibling it may import (`from common_x import ...`) edited: the suite too.
    sibling = str(OPS.parent / "common_tiny.py")
    assert reuses_any(spec, edited_tests({EDITED_TESTS_VAR: sibling}), env)
    elsewhere = os.pathsep.join([str(tmp_path / "test" / "test_tiny_ops.py"), str(tmp_path)])
    assert not reuses_any(spec, edited_tests({EDITED_TESTS_VAR: elsewhere}), env)
    assert edited_tests({}) == frozenset() and edited_tests({EDITED_TESTS_VAR: ""}) == frozenset()


PRELOAD = """
import json, sys
from suites import pytest_plugin
pytest_plugin.preload([sys.argv[1]])
[(_specs, _refused, expanded)] = pytest_plugin._PRELOADED.values()
imported = sorted(m for m in sys.modules if m.startswith("spyre_upstream_test_tiny_ops"))
print(json.dumps({"expanded": sorted(expanded), "imported": imported}))
"""


def preloaded(edited: str | None) -> dict[str, list[str]]:
    env = {**os.environ, "TORCH_ROOT": str(UPSTREAM_LIKE)}
    env.pop(EDITED_TESTS_VAR, None)
    if edited is not None:
        env[EDITED_TESTS_VAR] = edited
    done = subprocess.run(
        [sys.executable, "-c", PRELOAD, str(UPSTREAM_LIKE / "tiny.yaml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_preload_leaves_a_suite_over_an_edited_file_to_the_test_process() -> None:
    assert preloaded(str(OPS)) == {"expanded": [], "imported": []}
    unedited = preloaded(None)
    assert unedited["expanded"] == ["tiny"] and len(unedited["imported"]) == 1


IMPORT = """
import sys
from pathlib import Path
from suites.upstream import UpstreamError, import_test_file
for path in sys.argv[1:]:
    try:
        import_test_file(Path(path))
    except UpstreamError as exc:
        print("refused:", exc)
"""


# The symbolic link in the `long` run; the default run keeps the real path.
@pytest.mark.parametrize("root", ["real", pytest.param("symlink", marks=pytest.mark.long)])
def test_an_edited_test_file_s_import_is_logged_as_the_change_s_code(
    tmp_path: Path, root: str
) -> None:
    """What a changed torch module writes (`suites.import_log`), an edited upstream test file
    writes too: the runner then blames a hang, a kill or an error in it on the change. Also
    when TORCH_ROOT is reached through a symbolic link (the edited files are named by their
    real paths)."""
    from workflows.runner import change_imports

    real = tmp_path / "real"
    (real / "test").mkdir(parents=True)
    top = real if root == "real" else tmp_path / "link"
    if top != real:
        top.symlink_to(real, target_is_directory=True)
    edited, other = top / "test" / "test_edited.py", top / "test" / "test_other.py"
    edited.write_text("raise RuntimeError('boom at import')\n")
    other.write_text("raise RuntimeError('not the change')\n")
    log = tmp_path / "imports.jsonl"
    env = {
        **os.environ,
        "TORCH_ROOT": str(top),
        EDITED_TESTS_VAR: str(edited),
        change_imports.IMPORTS_VAR: str(log),
    }
    done = subprocess.run(
        [sys.executable, "-c", IMPORT, str(other), str(edited)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("refused:") == 2  # both fail to import; one is the change's
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [sorted(line) for line in lines] == [["at", "file", "start"], ["error", "failed"]]
    assert (lines[0]["start"], lines[0]["file"]) == ("test/test_edited.py", str(edited.resolve()))
    assert lines[1] == {"failed": "test/test_edited.py", "error": "RuntimeError: boom at import"}
    watched = change_imports.read(log)
    assert change_imports.blame(watched, 4) == (
        "importing the change's test file test/test_edited.py raised RuntimeError: boom at import"
    )
