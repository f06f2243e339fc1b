"""Started by Python when this directory is on PYTHONPATH (test subprocesses of the selection
benchmark only): applies the mutation named by $SPYRE_CI_MUTATION before anything imports
torch. Does nothing without that variable."""

import os

if os.environ.get("SPYRE_CI_MUTATION"):
    try:
        from workflows.bench.mutations.overlay import activate

        activate()
    except Exception as exc:  # noqa: BLE001 - any failure must stop the process, loudly
        # Python would report a failing sitecustomize and go on unmutated: the run would
        # measure nothing while looking fine.
        import sys

        print(
            f"spyre-ci mutation could not be applied: {type(exc).__name__}: {exc}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(70)
