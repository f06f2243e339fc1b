"""Started by Python when this directory is on PYTHONPATH (test subprocesses of the selection
benchmark only): applies the mutation named by $SPYRE_CI_MUTATION before anything imports
torch. Does nothing without that variable."""

import os

if os.environ.get("SPYRE_CI_MUTATION"):
    from workflows.mutations.overlay import activate

    activate()
