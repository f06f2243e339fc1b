"""The error categories of `workflows`, and the types its layers raise that are not one
package's own.

Every error a command can end on carries its category by type, so no command translates one
error into another to get its exit code; `workflows.cli.main` maps the categories once:

- `BadInput` (exit 2): the input as given cannot be used. `CommandError`, `PipelineError`
  (workflows.run.run_model), `SettingsError` (workflows.settings), `TraceError`
  (workflows.tracing.traces), and the other packages' own types (`RelayError`,
  `SelectorError`, `SpecError`, `ExportError`, `contracts.errors.Refused`) derive from it.
- `Unavailable` (exit 3, "not a test result"): the tests or a service they need could not
  run. `InfrastructureError`, `HistoryError` (workflows.stores.history: a History that
  fails while in use, SQLite's "database or disk is full" included, named by its file),
  `RedisUnavailable` (workflows.stores.redis_clients) and the other packages' outage types
  derive from it. What the machine raises under a command without a category of its own
  (an `OSError` such as a full disk, a `sqlite3.Error` of the state directory) is an outage
  too, mapped by `workflows.cli.main` to one line naming the path.
- `KeyboardInterrupt` (exit 130), also raised for SIGTERM.

The module sits at the root beside `settings.py`, under every layer, so the runner and the
stores raise these without importing the CLI.
"""

from __future__ import annotations

from contracts.errors import BadInput, Unavailable

__all__ = ["BadInput", "CommandError", "InfrastructureError", "Unavailable"]


class CommandError(BadInput):
    """A command cannot go on; the message says what and where, and what to do."""


class InfrastructureError(Unavailable):
    """The tests could not run (their processes, environment or services failed): exit code 3."""
