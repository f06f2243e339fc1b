"""`spyre-ci upgrade-diff --run` exits as every command does: 1 when its run found new
failures on the new torch (the conclusion its report and callback carry is `failure`), 0
otherwise, 3 when an environment or the tests could not run, 2 for input it cannot use.

The command runs for real, in a subprocess, on the committed 2.13.0 and 2.14.1 Inventories
without provisioning either torch: each environment is a complete cache entry (marker, the
Inventory and details it built, a `bin/python` that answers the metadata probe), and the run
on each version finds every outcome recorded in its work folder, as a stopped run that is
started again does, so no test process starts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from dashboard_export.model import RunRecord
from suites.model import Expectation, Inventory, Outcome, Status
from suites.results_file import end_line, start_line
from tests.testing.paths import REPO_ROOT
from workflows.drivers import upgrade
from workflows.run.layout import work_root

FIXTURES = REPO_ROOT / "tests" / "fixtures"
VERSIONS = ("2.13.0", "2.14.1")
INVENTORY = {v: FIXTURES / f"inventory-{v}.json.gz" for v in VERSIONS}

# The environment's python as the upgrade run calls it: the probe of `installed_torch`
# (`python -c ...`) answers the version; anything else (a test process, `-m workflows
# inventory`) fails as an interpreter without the project does.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-c" ]; then echo {version}; exit 0; fi
echo "ModuleNotFoundError: No module named 'workflows'" >&2
exit 1
"""


def prepared_env(cache: Path, version: str, *, inventory: bool = True) -> Path:
    """`cache/torch-<version>` as `provision` leaves it, with the Inventory it built."""
    path = cache / f"torch-{version}"
    (path / "bin").mkdir(parents=True)
    python = path / "bin" / "python"
    python.write_text(FAKE_PYTHON.format(version=version), encoding="utf-8")
    python.chmod(0o755)
    marker = {
        "torch": version,
        "project": str(upgrade.PROJECT_ROOT),
        "packages": list(upgrade.EXTRA_PACKAGES),
    }
    (path / upgrade.MARKER).write_text(json.dumps(marker) + "\n", encoding="utf-8")
    if inventory:
        key = upgrade.specs_key([], version)  # the bundled specs: no --specs
        shutil.copyfile(INVENTORY[version], path / f"inventory-{key}.json.gz")
        shutil.copyfile(
            upgrade.details_path_for(INVENTORY[version]), path / f"inventory-{key}.details.json.gz"
        )
    return path


def expected(inventory: Inventory) -> dict[str, Status]:
    """What each runnable variant does when nothing moved: passes, or xfails as declared."""
    return {
        v.id: Status.PASSED if v.expectation is Expectation.PASS else Status.XFAILED
        for v in inventory.variants
        if v.expectation is not Expectation.SKIP
    }


def record_outcomes(folder: Path, statuses: Mapping[str, Status]) -> None:
    """Outcomes as the shards' results files hold them, for the run to find and keep."""
    folder.mkdir(parents=True)
    with open(folder / "recorded.jsonl", "w", encoding="utf-8") as fh:
        for vid, status in statuses.items():
            failed = status in (Status.FAILED, Status.XFAILED)
            message = f"AssertionError: Tensor-likes are not close! ({vid})" if failed else ""
            fh.write(start_line(vid) + end_line(Outcome(vid, status, 0.25, message)))


Edit = Callable[[dict[str, Status], dict[str, Status]], None]


def upgrade_run(tmp_path: Path, edit: Edit) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`upgrade-diff --from 2.13.0 --to 2.14.1 --run` over recorded outcomes: what nothing
    moving looks like, changed by `edit(old, new)`."""
    cache, out = tmp_path / "envs", tmp_path / "out"
    for version in VERSIONS:
        prepared_env(cache, version)
    old, new = (expected(upgrade.load_inventory(INVENTORY[v])) for v in VERSIONS)
    edit(old, new)
    # Every runnable id, so the selection, the holdout and any expansion find theirs.
    for name, statuses in (("from", old), ("to", new), ("expand-from", old), ("expand-to", new)):
        record_outcomes(work_root(out) / name / "shard-0", statuses)
    return cli(*VERSION_ARGS, "--run", "--cache-dir", str(cache), "--out", str(out)), out


VERSION_ARGS = ("--from", VERSIONS[0], "--to", VERSIONS[1])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workflows", "upgrade-diff", "--no-progress", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def changed_variants(count: int) -> list[str]:
    """Variants whose definition changed, selected for that reason (never left to the holdout
    seed), run on both versions and expected to pass on both."""
    old, new = (upgrade.load_inventory(INVENTORY[v]) for v in VERSIONS)
    diff, selection = upgrade.diff_and_select(
        old,
        new,
        upgrade.load_details(upgrade.details_path_for(INVENTORY[VERSIONS[0]])),
        upgrade.load_details(upgrade.details_path_for(INVENTORY[VERSIONS[1]])),
    )
    on_old, on_new = set(selection.run_on_old(old)), set(selection.run_on_new())
    passing = {vid for vid, s in expected(old).items() if s is Status.PASSED}
    passing &= {vid for vid, s in expected(new).items() if s is Status.PASSED}
    ids = [
        c.id
        for c in diff.changed
        if c.id in selection.reasons and c.id in on_old and c.id in on_new and c.id in passing
    ]
    assert len(ids) >= count
    return ids[:count]


def conclusions(out: Path) -> tuple[str, str, dict[str, int], dict[str, str]]:
    """run.json's conclusion, callback.json's, and upgrade.json's run categories and rows."""
    record = RunRecord.load(out / "run.json")
    callback = json.loads((out / "callback.json").read_text(encoding="utf-8"))
    run = json.loads((out / "upgrade.json").read_text(encoding="utf-8"))["run"]
    rows = {r["id"]: r["category"] for r in run["rows"]}
    return record.effective_conclusion, callback["workflow"]["conclusion"], run["categories"], rows


def test_a_run_that_found_a_regression_exits_1(tmp_path: Path) -> None:
    regressed, fixed, broken = changed_variants(3)

    def edit(old: dict[str, Status], new: dict[str, Status]) -> None:
        new[regressed] = Status.FAILED  # passes on 2.13.0, fails on 2.14.1
        old[fixed] = Status.FAILED
        old[broken] = new[broken] = Status.ERROR  # pre-existing: fails on both

    done, out = upgrade_run(tmp_path, edit)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    record_says, callback_says, categories, rows = conclusions(out)
    assert record_says == callback_says == "failure"
    assert (categories["regressed"], categories["new-failing"]) == (1, 0)
    assert [rows[regressed], rows[fixed], rows[broken]] == [
        "regressed",
        "fixed",
        "unchanged-failing",
    ]
    assert f"regressed: {regressed} (passed -> failed)" in done.stdout
    assert "conclusion: failure (exit 1)" in done.stdout
    record = RunRecord.load(out / "run.json")
    assert [r.id for r in record.new_failures] == [regressed]
    assert upgrade.exit_code(record) == 1


def test_a_run_without_regressions_exits_0(tmp_path: Path) -> None:
    """A fixed variant and one failing on both versions: nothing newly broken."""
    fixed, broken = changed_variants(2)

    def edit(old: dict[str, Status], new: dict[str, Status]) -> None:
        old[fixed] = Status.FAILED
        old[broken] = new[broken] = Status.FAILED

    done, out = upgrade_run(tmp_path, edit)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    record_says, callback_says, categories, rows = conclusions(out)
    assert record_says == callback_says == "success"
    assert (categories["regressed"], categories["new-failing"]) == (0, 0)
    assert [rows[fixed], rows[broken]] == ["fixed", "unchanged-failing"]
    assert "conclusion: success (exit 0)" in done.stdout
    record = RunRecord.load(out / "run.json")
    assert record.failures and not record.new_failures  # the one failing on both
    assert upgrade.exit_code(record) == 0


# In the default run, exit 1 of an upgrade run is `test_a_run_that_found_a_regression_exits_1`.
@pytest.mark.long
def test_a_new_variant_failing_on_the_new_version_exits_1(tmp_path: Path) -> None:
    """Not a regression by category, but a new failure to the report and callback: the exit
    code follows their conclusion, not a count of its own."""
    old_inv, new_inv = (upgrade.load_inventory(INVENTORY[v]) for v in VERSIONS)
    old_ids = {v.id for v in old_inv.variants}
    added = next(v.id for v in new_inv.variants if v.id not in old_ids)

    def edit(_old: dict[str, Status], new: dict[str, Status]) -> None:
        new[added] = Status.FAILED

    done, out = upgrade_run(tmp_path, edit)
    record_says, callback_says, categories, rows = conclusions(out)
    assert (categories["regressed"], categories["new-failing"]) == (0, 1)
    assert rows[added] == "new-failing"
    assert record_says == callback_says == "failure"
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]


# In the default run: exit 3 of an upgrade run is `test_an_infrastructure_record_is_exit_3`;
# tests that cannot start are an infrastructure error in `test_infra_faults.py`.
@pytest.mark.long
def test_a_run_whose_tests_cannot_start_exits_3(tmp_path: Path) -> None:
    """One variant of the new version's selection was not recorded: its test process (the
    environment's python, which cannot run it) fails to start, an infrastructure fault."""
    regressed, missing = changed_variants(2)

    def edit(_old: dict[str, Status], new: dict[str, Status]) -> None:
        new[regressed] = Status.FAILED
        del new[missing]

    done, out = upgrade_run(tmp_path, edit)
    assert done.returncode == 3, done.stdout + done.stderr[-3000:]
    assert "infrastructure error (not a test result)" in done.stderr
    assert "torch 2.14.1" in done.stderr
    assert not (out / "run.json").exists()  # nothing reported as a test result


def test_an_infrastructure_record_is_exit_3(tmp_path: Path) -> None:
    """`exit_code` over a record whose tests could not run, its failures notwithstanding."""
    (regressed,) = changed_variants(1)

    def edit(_old: dict[str, Status], new: dict[str, Status]) -> None:
        new[regressed] = Status.FAILED

    done, out = upgrade_run(tmp_path, edit)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    record = RunRecord.load(out / "run.json")
    assert upgrade.exit_code(record) == 1
    broken = replace(record, infrastructure=("shard-0: the test process could not start",))
    assert broken.effective_conclusion == "failure" and upgrade.exit_code(broken) == 3


def test_an_environment_whose_python_cannot_build_the_inventory_exits_3(tmp_path: Path) -> None:
    cache = tmp_path / "envs"
    for version in VERSIONS:
        prepared_env(cache, version, inventory=False)
    done = cli(*VERSION_ARGS, "--cache-dir", str(cache), "--out", str(tmp_path / "out"))
    assert done.returncode == 3, done.stdout + done.stderr[-3000:]
    assert "infrastructure error (not a test result): torch 2.13.0:" in done.stderr
    assert "No module named 'workflows'" in done.stderr


def test_the_inventory_only_form_still_exits_0(tmp_path: Path) -> None:
    """No run, no conclusion: the diff and selection are written, exit 0."""
    done = cli(
        "--from-inventory", str(INVENTORY[VERSIONS[0]]),
        "--to-inventory", str(INVENTORY[VERSIONS[1]]),
        "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "conclusion:" not in done.stdout
    assert not (tmp_path / "run.json").exists()
    assert json.loads((tmp_path / "upgrade.json").read_text(encoding="utf-8"))["selected"]


# pip's own lines when the index answers without the version, and when it cannot be reached.
NO_SUCH_VERSION = (
    "ERROR: Could not find a version that satisfies the requirement torch==9.9.9 "
    "(from versions: 2.13.0, 2.14.1)\nERROR: No matching distribution found for torch==9.9.9"
)
OFFLINE = (
    "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) "
    "after connection broken by 'NewConnectionError': /simple/torch/\n"
    "ERROR: Could not find a version that satisfies the requirement torch==9.9.9 "
    "(from versions: none)\nERROR: No matching distribution found for torch==9.9.9"
)


def fake_base_python(folder: Path, pip_says: str) -> Path:
    """A `python` whose `-m venv DIR` makes a venv whose pip prints `pip_says` and fails."""
    folder.mkdir(parents=True)
    (folder / "pip_says.txt").write_text(pip_says + "\n", encoding="utf-8")
    script = folder / "python"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2" = "-m venv" ] || exit 9\n'
        'mkdir -p "$3/bin"\n'
        f'printf \'#!/bin/sh\\ncat "{folder}/pip_says.txt"\\nexit 1\\n\' > "$3/bin/python"\n'
        'chmod +x "$3/bin/python"\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(
    "pip_says, error",
    [(NO_SUCH_VERSION, upgrade.UpgradeError), (OFFLINE, upgrade.EnvironmentFault)],
    ids=["no-such-version", "index-unreachable"],
)
def test_provisioning_that_fails_names_whose_fault_it_is(
    tmp_path: Path, pip_says: str, error: type[Exception]
) -> None:
    """A version pip's index does not have is bad input (exit 2); an index pip cannot reach
    is the machine's fault (exit 3)."""
    python = fake_base_python(tmp_path / "base", pip_says)
    with pytest.raises(error) as raised:
        upgrade.provision(
            "9.9.9", tmp_path / "envs", base_python=str(python), log=lambda _line: None
        )
    assert "9.9.9 torch" in str(raised.value) and "torch==9.9.9" in str(raised.value)
    assert isinstance(raised.value, upgrade.EnvironmentFault) == (error is upgrade.EnvironmentFault)


def test_a_venv_that_cannot_be_made_is_an_environment_fault(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'Error: [Errno 28] No space left on device' >&2\nexit 1\n")
    python.chmod(0o755)
    with pytest.raises(upgrade.EnvironmentFault, match="No space left on device"):
        upgrade.provision(
            "2.14.1", tmp_path / "envs", base_python=str(python), log=lambda _line: None
        )


@pytest.mark.parametrize(
    "code, error", [(2, upgrade.UpgradeError), (1, upgrade.EnvironmentFault)], ids=["2", "1"]
)
def test_an_inventory_the_environment_cannot_build(
    tmp_path: Path, code: int, error: type[Exception]
) -> None:
    """The environment's `workflows inventory` exiting 2 refused its input (the specs); any
    other failure is the environment's."""
    env = upgrade.TorchEnv("2.14.1", tmp_path / "torch-2.14.1")
    (env.path / "bin").mkdir(parents=True)
    Path(env.python).write_text(f"#!/bin/sh\necho 'said on stderr' >&2\nexit {code}\n")
    Path(env.python).chmod(0o755)
    with pytest.raises(error, match=f"exited {code}:\nsaid on stderr"):
        upgrade.build_inventory(env, log=lambda _line: None)


def test_a_version_the_index_does_not_have_is_refused_before_the_old_one_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--to 9.9.9` (a typo) fails at once: the new version is provisioned first, so the old
    one's environment (minutes, a GB or more) is not made for nothing."""
    from workflows.drivers.upgrade import job

    asked: list[str] = []

    def provision(version: str, *_a: object, **_k: object) -> upgrade.TorchEnv:
        asked.append(version)
        if version == "9.9.9":
            raise upgrade.UpgradeError("torch 9.9.9: pip's index has no torch==9.9.9")
        return upgrade.TorchEnv(version, tmp_path / version)

    monkeypatch.setattr(job, "provision", provision)
    options = job.UpgradeOptions("2.13.0", "9.9.9", tmp_path / "out", tmp_path / "envs")
    with pytest.raises(upgrade.UpgradeError, match="no torch==9.9.9"):
        job.run_upgrade(options, lambda _line: None)
    assert asked == ["9.9.9"]
