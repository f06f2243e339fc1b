"""Started by Python when this folder is on PYTHONPATH (test processes of a run that applies
a change): applies the change named by $SPYRE_CI_CHANGE before anything imports torch, and,
for the selection benchmark, the mutation named by $SPYRE_CI_MUTATION. Does nothing without
those variables."""

import os

for _var, _module in (
    ("SPYRE_CI_CHANGE", "workflows.runner.change_overlay.finder"),
    ("SPYRE_CI_MUTATION", "workflows.bench.mutations.overlay"),
):
    if os.environ.get(_var):
        try:
            import importlib

            importlib.import_module(_module).activate()
        except Exception as exc:  # noqa: BLE001 - any failure must stop the process, loudly
            # Python would report a failing sitecustomize and go on without the change: the
            # run would test the unchanged torch while looking fine.
            import sys

            print(
                f"spyre-ci: the change could not be applied ({_var}): {type(exc).__name__}: {exc}",
                file=sys.stderr,
                flush=True,
            )
            os._exit(70)
