"""The distributed executor: Celery on Redis, the same pipeline steps as the embedded one.

    celery -A workflows.drivers.distributed worker        (or `spyre-ci worker`)

plan -> chord(one task per shard) -> finish. Delivery is at least once (`acks_late`,
`task_reject_on_worker_lost`): a worker killed mid-shard gets its shard redelivered. Every
side effect is keyed by run id and shard index (results in a Redis hash, History idempotent
by run, exports idempotent by key), so a redelivered task never duplicates a result.

A running shard holds a lease (`lease`); every live worker sweeps (`watch`): a shard whose
lease expired without a recorded result is sent to the queue again, so a worker killed
outright loses its shards for about one lease. Only the lease's owner records.

| module | what it does |
|---|---|
| `celery_app` | the Celery app and its settings; the Redis it runs on |
| `tasks` | the three tasks (`spyre_ci.plan`, `.shard`, `.finish`), `submit`, `resume` |
| `shard` | a shard task's steps under its lease |
| `finish` | a run's finish, once |
| `lease` | `ShardLease`: acquire, heartbeat, keep, record, release (Lua) |
| `drain` | warm shutdown in a pool process |
| `watch` | a worker's heartbeat and the sweep; `describe_worker` |
| `intake` | relay deliveries into runs: `consume_intake`, `intake_alive` |
| `health` | `status`, what `spyre-ci worker status` shows |
| `keys` | the Redis keys, states and registry entries |
| `outages` | `through_outages`: a step that waits Redis out |

The names below are loaded when first used, so that importing this package (for `status`,
say) builds no Celery app; `app` loads the tasks and the worker's watch with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .celery_app import TASK_TIME_LIMIT_S, VISIBILITY_TIMEOUT_S, app, make_app
    from .health import status
    from .intake import consume_intake, intake_alive
    from .keys import INTAKE_ALIVE, LEASED, OPEN_RUNS, PLAN_PRIORITY, WORKER_ALIVE
    from .lease import ShardLease
    from .outages import OUTAGE_WAIT_S, through_outages
    from .tasks import finish_task, plan_task, resume, shard_task, submit
    from .watch import describe_worker, sweep

__all__ = [
    "INTAKE_ALIVE",
    "LEASED",
    "OPEN_RUNS",
    "OUTAGE_WAIT_S",
    "PLAN_PRIORITY",
    "TASK_TIME_LIMIT_S",
    "VISIBILITY_TIMEOUT_S",
    "WORKER_ALIVE",
    "ShardLease",
    "app",
    "consume_intake",
    "describe_worker",
    "finish_task",
    "intake_alive",
    "make_app",
    "plan_task",
    "resume",
    "shard_task",
    "status",
    "submit",
    "sweep",
    "through_outages",
]
# Looked up in this order: the modules that build no Celery app first.
_MODULES = ("keys", "outages", "lease", "intake", "health", "celery_app", "tasks", "watch")


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "app":  # a worker's app runs the tasks and the watch: load them with it
        importlib.import_module(f"{__name__}.tasks")
        importlib.import_module(f"{__name__}.watch")
    for module in _MODULES:
        found = vars(importlib.import_module(f"{__name__}.{module}"))
        if name in found:
            return found[name]
    raise AttributeError(name)  # pragma: no cover - every name in __all__ is in a module
