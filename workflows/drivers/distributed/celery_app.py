"""The Celery app and the Redis it runs on (broker, results, the driver's state, History).

Built when this module is first imported: by the tasks, the intake loop or the worker, never
by `workflows.drivers.distributed` itself nor by `status`, which read Redis only.
"""

from __future__ import annotations

from typing import Any

import redis
from celery import Celery, signals

from workflows.run import run_model
from workflows.run.context import RunContext
from workflows.runner import zygote
from workflows.settings import Settings
from workflows.stores import redis_clients
from workflows.stores.history import RedisHistory

from . import keys, phases

# The longest a task may run; the broker's visibility timeout must exceed it, or Redis would
# hand a still-running shard to a second worker (its default is one hour).
TASK_TIME_LIMIT_S = 4 * 3600
VISIBILITY_TIMEOUT_S = TASK_TIME_LIMIT_S + 3600
# What a worker imports at start: the tasks it runs, and its heartbeat and sweep (signals).
WORKER_MODULES = ("workflows.drivers.distributed.tasks", "workflows.drivers.distributed.watch")


def _redis_url() -> str:
    return Settings.from_env().redis_url or "redis://127.0.0.1:6379/0"


def make_app(url: str | None = None) -> Celery:
    url = url or _redis_url()
    celery_app = Celery("spyre_ci", broker=url, backend=url, include=list(WORKER_MODULES))
    celery_app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=TASK_TIME_LIMIT_S,
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
        result_backend_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        # A shard keeps running through a broker outage; its result is stored when Redis is
        # back, and acks_late redelivers it if the worker dies meanwhile.
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return celery_app


app = make_app()


def store() -> redis.Redis:
    """The driver's state: the broker's Redis, one shared client per process."""
    return redis_clients.shared(app.conf.broker_url)


def history() -> RedisHistory:
    return RedisHistory(app.conf.broker_url)


# The run's services in this worker: built once, when the worker starts (its pool's processes
# inherit it), and handed to every plan and finish it runs.
_context: list[RunContext] = []


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def _build_context(**_kwargs: Any) -> None:
    settings = Settings.from_env()
    zygote.share(settings)  # the warm runner of this state directory, for every shard
    from workflows.stores import kept  # selector: not for every command

    kept.keep_in(settings.cache_dir)  # loaded forms (trace, Inventory, definitions)
    _context[:] = [RunContext.open(settings, history())]


def context() -> RunContext:
    """This worker's run context; a process that runs a task without having started a worker
    (an eager call) builds it on first use."""
    if not _context:
        _build_context()
    return _context[0]


def load_planned(run_id: str, client: redis.Redis | None = None) -> run_model.PlannedRun:
    """The run's stored plan (from `client`, this process's store by default)."""
    return load_phased(run_id, client)[0]


def load_phased(run_id: str, client: redis.Redis | None = None) -> tuple[run_model.PlannedRun, int]:
    """The run's stored plan and how many of its shards decide the verdict (`phases`)."""
    body = (client or store()).get(keys.key(run_id, "planned"))
    if body is None:
        raise run_model.PipelineError(f"run {run_id}: no stored plan; re-submit the event")
    return phases.loads(body)
