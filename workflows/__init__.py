"""The pipeline (plan -> run -> finish), its executors, History, and the `spyre-ci` CLI."""
