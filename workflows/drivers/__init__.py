"""What drives a run: in one process (`embedded`), on Celery workers (`distributed`, fed by
`intake_bridge`), the upgrade's two-version diff run (`upgrade/`), and terminal progress.
Imports `run` and the layers below it; never `cli`."""
