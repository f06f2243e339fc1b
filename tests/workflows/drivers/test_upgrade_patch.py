"""`upgrade.patch`: the upgrade run's proposed edit to the expectations files applies with
`git apply`, lints clean, and the expectations then say what the run found."""

from __future__ import annotations

import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from suites.expand import expand, load_suites
from suites.loader import load_spec
from suites.model import Expectation
from suites.rules import expectation_rules
from suites.spec_patch import NewEntry, expectations_patch
from tests.testing.paths import REPO_ROOT
from workflows.cli.main import main
from workflows.drivers.upgrade.patch import upgrade_patch, write_upgrade_patch

SPEC = """\
test_suite_config:
  name: mini
  opinfo:
    - db: op_db
      templates: [compare_cpu]
      ops:
        include: [{name: add}, {name: mul}, {name: sub}]
      dtypes: [float32, bfloat16]
      unlisted_test_mode: mandatory_success
      expectations_file: mini.expectations.yaml
"""

EXPECTATIONS = """\
# Edited by hand.
version: 1
expectations:
# add: rounding
- id: mini::compare_cpu::add::float32
  mode: xfail
  reason: 'AssertionError: Tensor-likes are not close! max abs diff: 0.1'
# mul: known
- id: mini::compare_cpu::mul::float32
  mode: xfail
  reason: 'AssertionError: Tensor-likes are not close! max abs diff: 0.25'
"""

REGRESSED = "mini::compare_cpu::sub::float32"
FIXED = "mini::compare_cpu::add::float32"
NEW_FAILING = "mini::compare_cpu::mul::bfloat16"
NEW_HANGING = "mini::compare_cpu::sub::bfloat16"


def _row(vid: str, category: str, before: str | None, after: str, message: str = "") -> dict:  # type: ignore[type-arg]
    return {"id": vid, "category": category, "before": before, "after": after, "message": message}


DATA = {
    "from_version": "2.13.0",
    "to_version": "2.14.1",
    "run": {
        "rows": [
            _row(
                REGRESSED,
                "regressed",
                "passed",
                "failed",
                "Traceback (most recent call last):\nE   RuntimeError: spyre refuses float64\n",
            ),
            _row(FIXED, "fixed", "xfailed", "xpassed"),
            _row(NEW_FAILING, "new-failing", None, "failed", "E   AssertionError: 1 != 2"),
            _row(NEW_HANGING, "new-failing", None, "timeout", "timeout: no result in 60 s"),
            _row("mini::compare_cpu::mul::float32", "unchanged-failing", "xfailed", "xfailed"),
        ]
    },
}


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    (folder / "specs").mkdir(parents=True)
    (folder / "specs" / "mini.yaml").write_text(SPEC, encoding="utf-8")
    (folder / "specs" / "mini.expectations.yaml").write_text(EXPECTATIONS, encoding="utf-8")
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    return folder


def _apply(patch: Path, repo: Path) -> None:
    check = subprocess.run(
        ["git", "apply", "--check", str(patch)], cwd=repo, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr + patch.read_text()
    subprocess.run(["git", "apply", str(patch)], cwd=repo, check=True)


def test_patch_adds_regressions_and_new_failures_removes_fixes(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = repo / "specs"
    patch = tmp_path / "out" / "upgrade.patch"
    patch.parent.mkdir()
    line = write_upgrade_patch(DATA, [str(specs)], patch, "upgrade-2.13.0-2.14.1-20261202T0100Z")
    # 3 added from 2.14.1 on; the fixed one's entry kept for the torches before it
    assert str(patch) in line, line
    assert "adds 3 and removes 0 expectation(s), keeps 1 for the torches before" in line, line
    text = patch.read_text()
    assert "a/specs/mini.expectations.yaml" in text  # relative to the git work tree
    assert "+# upgrade run upgrade-2.13.0-2.14.1-20261202T0100Z, torch 2.13.0 -> 2.14.1: " in text
    assert "regressed (passed -> failed)" in text
    assert "new-failing (new -> failed)" in text
    _apply(patch, repo)
    patched = (specs / "mini.expectations.yaml").read_text()
    assert "# mul: known\n" in patched  # comments stay
    assert "reason: 'RuntimeError: spyre refuses float64'" in patched
    assert main(["suites", "lint", str(specs)]) == 0
    capsys.readouterr()
    # Valid on both torches: a torch before 2.14.1 keeps what it had, 2.14.1 on gets the
    # run's; the installed torch, whichever it is, expands to its side.
    variants = {v.id: v for v in expand(load_suites([specs])).variants}
    installed = Version(metadata.version("torch").split("+")[0])
    new_side = installed >= Version("2.14.1")
    xfail_if = {True: Expectation.XFAIL, False: Expectation.PASS}
    assert variants[REGRESSED].expectation is xfail_if[new_side]
    assert variants[NEW_FAILING].expectation is xfail_if[new_side]
    assert variants[FIXED].expectation is xfail_if[not new_side]
    assert variants["mini::compare_cpu::mul::float32"].expectation is Expectation.XFAIL
    file = specs / "mini.expectations.yaml"
    on = {
        version: {r.id_glob: r for r in expectation_rules(load_spec(file), version)}
        for version in ("2.13.0", "2.14.1", "2.15.0.dev20261201")
    }
    assert set(on["2.13.0"]) == {FIXED, "mini::compare_cpu::mul::float32"}
    for newer in ("2.14.1", "2.15.0.dev20261201"):
        assert set(on[newer]) == {
            REGRESSED,
            NEW_FAILING,
            NEW_HANGING,
            "mini::compare_cpu::mul::float32",
        }
        assert on[newer][NEW_HANGING].mode is Expectation.SKIP  # a hang is not run again
        assert on[newer][NEW_FAILING].reason == "AssertionError: 1 != 2"
    # Ids stay in order (the list was sorted): the new entries sit between the old ones.
    ids = [ln.split("id: ")[1] for ln in patched.splitlines() if ln.startswith("- id: ")]
    assert ids == sorted(ids) and len(ids) == 5
    # Once applied, the same run proposes nothing more.
    again, _root, _notes = upgrade_patch(DATA, load_suites([specs]))
    assert again == ""


def test_an_entry_of_a_variant_the_new_torch_removed_is_kept_for_the_old_one(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 2.14.1 removed `qr`'s OpInfo: its exact xfail entry would match nothing there (an
    # orphan the audit reports), so it holds for the torches before 2.14.1 only.
    data = {
        "from_version": "2.13.0",
        "to_version": "2.14.1",
        "removed": ["mini::compare_cpu::mul::float32"],
        "run": {"rows": [_row("mini::compare_cpu::add::float32", "removed", "xfailed", "")]},
    }
    patch = tmp_path / "upgrade.patch"
    line = write_upgrade_patch(data, [str(repo / "specs")], patch, "up-1")
    assert "adds 0 and removes 0 expectation(s), keeps 2 for the torches before" in line, line
    _apply(patch, repo)
    file = repo / "specs" / "mini.expectations.yaml"
    assert main(["suites", "lint", str(repo / "specs")]) == 0
    capsys.readouterr()
    on = {
        v: {r.id_glob for r in expectation_rules(load_spec(file), v)} for v in ("2.13.0", "2.14.1")
    }
    assert on["2.13.0"] == {"mini::compare_cpu::add::float32", "mini::compare_cpu::mul::float32"}
    assert on["2.14.1"] == set()
    again, _root, _notes = upgrade_patch(data, load_suites([repo / "specs"]))
    assert again == ""  # applied once, nothing more to propose


def test_what_cannot_be_patched_is_a_note(repo: Path) -> None:
    data = {
        "from_version": "2.13.0",
        "to_version": "2.14.1",
        "run": {
            "rows": [
                _row("other::compare_cpu::add::float32", "regressed", "passed", "failed", "E x"),
                _row("mini::compare_cpu::sub::float32", "fixed", "failed", "passed"),
            ]
        },
    }
    text, root, notes = upgrade_patch(data, load_suites([repo / "specs"]))
    assert text == ""
    assert any("suite 'other' has no expectations file" in n for n in notes)
    assert any("fixed, not an exact-id xfail entry" in n for n in notes)


def test_adding_to_an_empty_or_unsorted_list(tmp_path: Path) -> None:
    empty = tmp_path / "a.expectations.yaml"
    empty.write_text("version: 1\nexpectations: []  # none yet\n")
    unsorted = tmp_path / "b.expectations.yaml"
    unsorted.write_text(
        "version: 1\nexpectations:\n  - id: s::t::z::d\n    mode: xfail\n    reason: r\n"
        "  - id: s::t::a::d\n    mode: xfail\n    reason: r\nother: 1\n"
    )
    entry = NewEntry("s::t::m::d", "xfail", "RuntimeError: x", "upgrade run")
    diff, refused = expectations_patch({}, {empty: [entry], unsorted: [entry]}, tmp_path)
    assert refused == []
    assert "+expectations:  # none yet\n+# upgrade run\n+- id: s::t::m::d\n" in diff
    assert (
        "     reason: r\n+  # upgrade run\n+  - id: s::t::m::d\n+    mode: xfail\n"
        "+    reason: 'RuntimeError: x'\n other: 1\n"
    ) in diff


def test_patch_of_a_run_over_the_bundled_specs_applies_to_the_checkout(tmp_path: Path) -> None:
    """Rows over the committed Inventories' ids: the patch applies to this checkout."""
    from suites.loader import spec_paths

    bundled = load_suites(None)
    exp = next(p for p in spec_paths(None) if p.name == "ops.yaml").parent
    xfail_id = next(
        ln.split("id: ")[1].strip()
        for ln in (exp / "ops.expectations.yaml").read_text().splitlines()
        if ln.startswith("- id: ")
    )
    data = {
        "from_version": "2.13.0",
        "to_version": "2.14.1",
        "run": {
            "rows": [
                _row(
                    "ops::compare_cpu::quantile::float32",
                    "regressed",
                    "passed",
                    "failed",
                    "RuntimeError: spyre does not support float64",
                ),
                _row(xfail_id, "fixed", "xfailed", "xpassed"),
            ]
        },
    }
    text, root, notes = upgrade_patch(data, bundled)
    assert root == REPO_ROOT and notes == []
    patch = tmp_path / "upgrade.patch"
    patch.write_text(text)
    check = subprocess.run(
        ["git", "apply", "--check", str(patch)], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr + text
    # Applied to a copy of the bundled folder, the specs lint clean.
    copy = tmp_path / "copy"
    shutil.copytree(exp, copy / exp.relative_to(REPO_ROOT))
    subprocess.run(["git", "init", "-q", str(copy)], check=True)
    subprocess.run(["git", "apply", str(patch)], cwd=copy, check=True)
    assert main(["suites", "lint", str(copy / exp.relative_to(REPO_ROOT))]) == 0


def test_the_upgrade_run_writes_upgrade_patch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`upgrade-diff --run` with the environments and the runs faked (the committed
    Inventories, one regression): upgrade.patch is written, named, and applies here."""
    import json

    from suites.model import Outcome, Status
    from workflows.drivers import upgrade

    fixtures = REPO_ROOT / "tests" / "fixtures"
    paths = {v: fixtures / f"inventory-{v}.json.gz" for v in ("2.13.0", "2.14.1")}
    inventories = {v: upgrade.load_inventory(p) for v, p in paths.items()}
    # A variant both fixtures run and no bundled expectations entry names yet (once a bump
    # has applied the real upgrade's patch, `quantile`'s holds from 2.14.1 on).
    named = "".join(p.read_text() for p in (REPO_ROOT / "suites" / "specs").glob("*.yaml"))
    _diff, selection = upgrade.diff_and_select(
        inventories["2.13.0"],
        inventories["2.14.1"],
        *(upgrade.load_details(upgrade.details_path_for(paths[v])) for v in paths),
    )
    new_by_id = inventories["2.14.1"].by_id()
    regressed = next(
        vid
        for vid in sorted(selection.reasons)
        if vid.startswith("ops::compare_cpu::")
        and vid in inventories["2.13.0"].by_id()
        and new_by_id[vid].expectation is Expectation.PASS
        and f"- id: {vid}\n" not in named
    )

    def provision(version: str, *_a: object, **_k: object) -> upgrade.TorchEnv:
        return upgrade.TorchEnv(version, tmp_path / f"env-{version}")

    def build(env: upgrade.TorchEnv, *_a: object, **_k: object) -> upgrade.BuiltInventory:
        path = paths[env.version]
        details = upgrade.load_details(upgrade.details_path_for(path))
        return upgrade.BuiltInventory(inventories[env.version], path, details, None, 0.0)

    def run(env: upgrade.TorchEnv, ids: list[str], *_a: object, **_k: object) -> upgrade.VersionRun:
        def outcome(vid: str) -> Outcome:
            bad = env.version == "2.14.1" and vid == regressed
            return Outcome(
                vid,
                Status.FAILED if bad else Status.PASSED,
                0.1,
                "E   RuntimeError: spyre refuses float64" if bad else "",
            )

        return upgrade.VersionRun(env.version, list(ids), {v: outcome(v) for v in ids}, [], 1.0)

    from workflows.drivers.upgrade import job

    monkeypatch.setattr(job, "provision", provision)
    monkeypatch.setattr(job, "build_inventory", build)
    monkeypatch.setattr(job, "run_version", run)
    monkeypatch.setattr(upgrade.diff_run, "run_version", run)  # the expansion's runs
    out = tmp_path / "out"
    code = main(
        [
            "upgrade-diff",
            "--from",
            "2.13.0",
            "--to",
            "2.14.1",
            "--run",
            "--no-progress",
            "--cache-dir",
            str(tmp_path / "envs"),  # never the user's, whatever the fakes miss
            "--out",
            str(out),
        ]
    )
    stdout, stderr = capsys.readouterr()
    assert not (tmp_path / "envs").exists()  # the fakes stood for every environment
    assert code == 1, stderr  # the run has a regression: exit 1, as its report says
    patch = out / "upgrade.patch"
    assert f"patch: {patch}" in stdout and "adds 1 and removes 0" in stdout, stdout
    data = json.loads((out / "upgrade.json").read_text(encoding="utf-8"))
    assert data["patch"] == str(patch)
    text = patch.read_text()
    run_id = json.loads((out / "run.json").read_text(encoding="utf-8"))["run_id"]
    assert f"+# upgrade run {run_id}, torch 2.13.0 -> 2.14.1: regressed" in text
    assert f"+- id: {regressed}\n" in text
    check = subprocess.run(
        ["git", "apply", "--check", str(patch)], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr + text
