"""`spyre-ci upgrade-diff`: the offline form on the committed Inventories (default run), and
the live run in two provisioned environments (slow)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.testing.paths import REPO_ROOT, TINY_SPEC
from workflows.cli.main import main
from workflows.drivers import upgrade
from workflows.settings import Settings

FIXTURES = REPO_ROOT / "tests" / "fixtures"
OLD = FIXTURES / "inventory-2.13.0.json.gz"
NEW = FIXTURES / "inventory-2.14.1.json.gz"


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workflows", "upgrade-diff", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The same command in this process (errors need no new interpreter): (code, stderr)."""
    code = main(["upgrade-diff", *args])
    return code, capsys.readouterr().err


def test_offline_writes_upgrade_json(tmp_path: Path):
    result = cli("--from-inventory", str(OLD), "--to-inventory", str(NEW), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "upgrade.json").read_text(encoding="utf-8"))
    for key in ("variants_from", "variants_to", "changed", "added", "removed", "selected"):
        assert key in data, key
    assert (data["from_version"], data["to_version"]) == ("2.13.0", "2.14.1")
    assert data["variants_from"] > 8000 and data["variants_to"] > 8000
    assert data["details_used"]  # the committed details sit beside the inventories
    assert all(c["what"] for c in data["changed"])
    assert {r["id"] for r in data["selected"]} >= set(data["added"])
    assert all(r["reasons"] for r in data["selected"])
    assert data["api"]["removed"] and data["api"]["added"]
    assert 0 < data["selection"]["share"] < 0.5
    assert "written:" in result.stdout and "selected" in result.stdout
    # Same inputs, same document (the holdout is seeded).
    again = cli(
        "--from-inventory", str(OLD), "--to-inventory", str(NEW), "--out", str(tmp_path / "again")
    )
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / "upgrade.json").read_text() == (
        tmp_path / "upgrade.json"
    ).read_text().replace(str(tmp_path), str(tmp_path))


def test_offline_without_details_still_diffs(tmp_path: Path):
    old, new = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    shutil.copyfile(OLD, old)
    shutil.copyfile(NEW, new)
    result = cli(
        "--from-inventory", str(old), "--to-inventory", str(new), "--out", str(tmp_path / "out")
    )
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "out" / "upgrade.json").read_text(encoding="utf-8"))
    assert not data["details_used"]
    assert any("no details" in n for n in data["notes"])


def test_missing_inventory_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    code, err = cli_here(
        capsys, "--from-inventory", str(tmp_path / "nope.json.gz"), "--to-inventory", str(NEW)
    )
    assert code == 2
    assert "nope.json.gz: no inventory there" in err
    assert "spyre-ci inventory --out" in err


@pytest.mark.parametrize(
    "content",
    [
        b"not gzip at all",
        gzip.compress(b'{"format": 1'),
        gzip.compress(b'{"format": 99}'),
        gzip.compress(b"[]"),
    ],
    # Named, not shown: gzip bytes carry a timestamp, and every xdist worker must collect
    # the same test ids.
    ids=["not-gzip", "truncated-json", "unknown-format", "not-an-object"],
)
def test_corrupt_inventory_is_named(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(content)
    code, err = cli_here(capsys, "--from-inventory", str(bad), "--to-inventory", str(NEW))
    assert code == 2
    assert f"{bad}: not a readable inventory" in err


def test_corrupt_details_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    old, new = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    shutil.copyfile(OLD, old)
    shutil.copyfile(NEW, new)
    (tmp_path / "b.details.json.gz").write_bytes(b"garbage")
    code, err = cli_here(capsys, "--from-inventory", str(old), "--to-inventory", str(new))
    assert code == 2
    assert "b.details.json.gz: not readable details" in err


@pytest.mark.parametrize(
    "args, message",
    [
        ((), "give --from VERSION --to VERSION"),
        (("--from", "2.13.0", "--from-inventory", "x"), "not both"),
        (("--from-inventory", str(OLD)), "needs both --from-inventory and --to-inventory"),
        (("--from-inventory", str(OLD), "--to-inventory", str(NEW), "--run"), "need environments"),
        (("--from", "2.13.0"), "give both --from VERSION and --to VERSION"),
        (("--from", "2.13.0", "--to", "2.13.0"), "the same version"),
        (("--from-inventory", str(OLD), "--to-inventory", str(NEW), "--holdout", "3"), "--holdout"),
    ],
)
def test_usage_errors(args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]):
    code, err = cli_here(capsys, *args)
    assert code == 2
    assert message in err


def test_details_paths_and_spec_keys(tmp_path: Path):
    assert upgrade.details_path_for("x/inv.json.gz") == Path("x/inv.details.json.gz")
    assert upgrade.details_path_for("inv.json") == Path("inv.details.json.gz")
    spec = tmp_path / "s.yaml"
    spec.write_text("a: 1\n", encoding="utf-8")
    key = upgrade.specs_key([str(spec)])
    assert key == upgrade.specs_key([str(spec)])
    spec.write_text("a: 2\n", encoding="utf-8")
    assert key != upgrade.specs_key([str(spec)])
    # the environments' folder upgrade-diff hands `provision` without --cache-dir
    assert Settings.from_env({"SPYRE_CI_ENV_CACHE": "/c"}).env_cache_dir == Path("/c")
    cache = Settings.from_env({"XDG_CACHE_HOME": "/x"}).env_cache_dir
    assert cache == Path("/x/spyre-ci/envs")


@pytest.mark.long
def test_shard_runner_takes_another_python(tmp_path: Path):
    """The upgrade run's hook: shards run with a given interpreter (here: a venv's python)."""
    from workflows.runner.shard_runner import run_shard

    # A venv that shares this one's packages: its own bin/python, the project importable.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "venv",
            "--without-pip",
            "--system-site-packages",
            str(tmp_path / "venv"),
        ],
        check=True,
    )
    python = tmp_path / "venv" / "bin" / "python"
    parent = sysconfig.get_path("purelib")
    child = Path(sysconfig.get_path("purelib", vars={"base": str(tmp_path / "venv")}))
    # addsitedir, not a bare path: the parent's own .pth files (the editable install) count.
    (child / "parent.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    ids = ["tiny::compare_cpu::add::float32"]
    result = run_shard("s", ids, tmp_path / "work", specs=[str(TINY_SPEC)], python=str(python))
    assert [o.id for o in result.outcomes] == ids
    assert result.outcomes[0].status.value == "passed", result.outcomes[0].message
    stderr = next((tmp_path / "work").glob("s.*.stderr")).read_text()
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_live_upgrade_run_on_two_environments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Provision (or reuse) torch 2.13.0 and 2.14.1, diff, run and validate the tiny suite."""
    # The user's environment cache, on purpose: the 2.14.1 venv is 5.8 GB, made once.
    monkeypatch.delenv("SPYRE_CI_ENV_CACHE", raising=False)
    out = tmp_path / "out"
    result = cli(
        "--from",
        "2.13.0",
        "--to",
        "2.14.1",
        "--specs",
        str(TINY_SPEC),
        "--run",
        "--validate",
        "--jobs",
        "2",
        "--out",
        str(out),
        timeout=3600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads((out / "upgrade.json").read_text(encoding="utf-8"))
    assert (data["from_version"], data["to_version"]) == ("2.13.0", "2.14.1")
    assert data["variants_from"] == data["variants_to"] == 16
    run = data["run"]
    old_ids = set(upgrade.load_inventory(data["from_inventory"]).by_id())
    chosen = {r["id"] for r in data["selected"]} | set(data["holdout"])
    assert run["from"]["ran"] == len((old_ids & chosen) | set(data["removed"]))
    assert run["to"]["ran"] == len(chosen)
    assert set(run["categories"]) == {
        "regressed",
        "fixed",
        "new-failing",
        "new-passing",
        "removed",
        "unchanged-failing",
    }
    check = data["validate"]
    assert check["full"][0]["ran"] == check["full"][1]["ran"] == 16
    assert check["caught"] + check["missed"] == check["outcome_changes"]
    record = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert record["upgrade"]["from_version"] == "2.13.0"
    assert record["environment"]["torch_version"] == "2.14.1"
    assert "Upgrade 2.13.0 -> 2.14.1" in (out / "report.md").read_text(encoding="utf-8")
    assert (out / "hud" / "envelope.json").exists()
    # Provisioning is cached: a second diff reuses both environments and Inventories.
    again = cli(
        "--from",
        "2.13.0",
        "--to",
        "2.14.1",
        "--specs",
        str(TINY_SPEC),
        "--out",
        str(tmp_path / "again"),
    )
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("reusing") == 4


def test_report_of_an_upgrade_run(tmp_path: Path):
    """Outcomes on both versions -> categories, upgrade.json's run section, HUD files, report."""
    from dashboard_export.model import RunRecord
    from suites.model import Outcome, Status

    old, new = upgrade.load_inventory(OLD), upgrade.load_inventory(NEW)
    diff, selection = upgrade.diff_and_select(
        old,
        new,
        upgrade.load_details(upgrade.details_path_for(OLD)),
        upgrade.load_details(upgrade.details_path_for(NEW)),
    )
    ids_old, ids_new = list(selection.run_on_old(old)), list(selection.run_on_new())
    changed = [c.id for c in diff.changed if c.id in ids_new and c.id in ids_old]
    regressed, fixed = changed[0], changed[1]
    new_failing = next(vid for vid in diff.added if vid in ids_new)

    def outcome(vid: str, bad: bool) -> Outcome:
        return Outcome(
            vid,
            Status.FAILED if bad else Status.PASSED,
            0.5,
            f"AssertionError: {vid} differs" if bad else "",
        )

    runs = (
        upgrade.VersionRun(
            "2.13.0", ids_old, {v: outcome(v, v == fixed) for v in ids_old}, [], 10.0
        ),
        upgrade.VersionRun(
            "2.14.1",
            ids_new,
            {v: outcome(v, v in (regressed, new_failing)) for v in ids_new},
            [],
            11.0,
        ),
    )
    moved = upgrade.moved_rows(diff, *runs)
    section = upgrade.run_section(moved, *runs)
    assert section["categories"]["regressed"] == 1
    assert section["categories"]["fixed"] == 1
    assert section["categories"]["new-failing"] == 1
    assert section["categories"]["removed"] == len(diff.removed)
    # New variants, and variants 2.13.0 declared skips for (its Triton DSL skip went away).
    newly_runnable = [v for v in ids_new if v not in ids_old and v not in diff.added]
    assert len(newly_runnable) == 7 and all(
        "::bmm.triton_optimized::" in v for v in newly_runnable
    ), newly_runnable
    assert section["categories"]["new-passing"] == len(
        [v for v in diff.added if v in ids_new]
    ) - 1 + len(newly_runnable)
    env = upgrade.TorchEnv("2.14.1", tmp_path / "env")
    made = upgrade.upgrade_record(
        diff,
        selection,
        moved,
        old,
        new,
        env,
        runs[1],
        "2026-11-29T15:00:00Z",
        "2026-11-29T15:10:00Z",
    )
    written = upgrade.write_report(tmp_path / "out", made, runs[1])
    record = RunRecord.load(written["run"])
    assert record.upgrade is not None
    assert record.upgrade.from_version == "2.13.0" and record.environment.torch_version == "2.14.1"
    rows = {r.id: str(r.category) for r in record.upgrade.rows}
    assert rows[regressed] == "regressed" and rows[fixed] == "fixed"
    assert record.effective_conclusion == "failure"  # a regression is a new failure
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "## Upgrade 2.13.0 -> 2.14.1" in report and regressed in report
    assert record.plan is not None
    assert any(reason.startswith("definition: changed ") for reason, _ in record.plan.top_reasons)
    assert (tmp_path / "out" / "hud" / "envelope.json").exists()


def test_a_stopped_version_run_continues(tmp_path: Path):
    """What a killed attempt recorded is kept; the torn line and the unfinished test are not."""
    work = tmp_path / "work"
    (work / "shard-0").mkdir(parents=True)
    (work / "shard-0" / "a.jsonl").write_text(
        '{"event": "start", "id": "s::t::a::float32"}\n'
        '{"event": "end", "id": "s::t::a::float32", "status": "failed", "duration_s": 1.5,'
        ' "message": "E   AssertionError: 1 != 2"}\n'
        '{"event": "start", "id": "s::t::b::float32"}\n{"event": "end", "id": "s::t::b::fl',
        encoding="utf-8",
    )
    (work / "wall.json").write_text('{"wall_s": 40.0}\n', encoding="utf-8")
    kept = upgrade.recorded_outcomes(work)
    assert list(kept) == ["s::t::a::float32"]
    assert kept["s::t::a::float32"].message == "AssertionError: 1 != 2"
    # Everything asked for is already recorded: nothing runs (no interpreter is needed).
    env = upgrade.TorchEnv("9.9.9", tmp_path / "no-env")
    run = upgrade.run_version(
        env, ["s::t::a::float32"], work, show_progress=False, log=lambda _: None
    )
    assert run.outcomes == kept and run.wall_s >= 40.0
    assert json.loads((work / "wall.json").read_text())["wall_s"] >= 40.0
