"""The version-upgrade run: one isolated environment per torch version, both Inventories, the
diff and selection (`selector.upgrade`), the selection run on both versions, and the report.

```
provision(2.14.1), provision(2.13.0)    <cache>/torch-<v> (the new one first): python -m venv,
                                        pip install torch==<v>, the project's requirements but
                                        torch, pytest; the project --no-deps
build_inventory(env) x 2                <venv>/bin/python -m workflows inventory --out ...
    <venv>/bin/python -m workflows.drivers.upgrade describe --out ...
selector.upgrade: diff, select          (pure)
run_ids(env, ids) x 2                   shard subprocesses with the venv's python
classify -> UpgradeDiff -> RunRecord    dashboard_export.layout.write_run (HUD files, report)
exit_code(record)                       1: conclusion failure; 3: it could not run; else 0
```

`python -m workflows.drivers.upgrade describe --out FILE.json.gz [--specs PATH]...` runs INSIDE an
environment: it writes the details the diff names changes with (per-subject field digests,
per-variant decorators and precision, template digests), using the suites' own fingerprint
functions.

Modules: `environments` (provision), `inventories` (build, details, describe), `diff_run`
(run both versions, compare, expand, validate), `export` (RunRecord with the diff rows); the
plan is `workflows.run.planning.plan_upgrade`, the pipeline's planning with the upgrade's Scout.
The names below are the package's interface (`from workflows import upgrade`).
"""

from workflows.drivers.upgrade.diff_run import (
    UPGRADE_FORMAT,
    VersionRun,
    expand_misses,
    moved_rows,
    recorded_outcomes,
    run_ids,
    run_section,
    run_version,
    upgrade_json,
    validate_full,
    write_json,
)
from workflows.drivers.upgrade.environments import (
    EXTRA_PACKAGES,
    MARKER,
    PROJECT_ROOT,
    EnvironmentFault,
    TorchEnv,
    UpgradeError,
    provision,
)
from workflows.drivers.upgrade.export import (
    environment_of,
    exit_code,
    upgrade_record,
    write_report,
)
from workflows.drivers.upgrade.inventories import (
    DETAILS_FORMAT,
    BuiltInventory,
    build_inventory,
    describe,
    details_path_for,
    load_details,
    specs_key,
)
from workflows.run.pipeline import load_inventory
from workflows.run.planning import plan_upgrade as diff_and_select  # the upgrade's Scout + plan

__all__ = [
    "DETAILS_FORMAT",
    "EXTRA_PACKAGES",
    "MARKER",
    "PROJECT_ROOT",
    "UPGRADE_FORMAT",
    "BuiltInventory",
    "EnvironmentFault",
    "TorchEnv",
    "UpgradeError",
    "VersionRun",
    "build_inventory",
    "describe",
    "details_path_for",
    "diff_and_select",
    "environment_of",
    "exit_code",
    "expand_misses",
    "load_details",
    "load_inventory",
    "moved_rows",
    "provision",
    "recorded_outcomes",
    "run_ids",
    "run_section",
    "run_version",
    "specs_key",
    "upgrade_json",
    "upgrade_record",
    "validate_full",
    "write_json",
    "write_report",
]
