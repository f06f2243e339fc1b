"""Where a run's files live: the one place that knows the out directory's layout and the
names of a run's shards.

    <out>/plan.json        the plan, for people and exports
    <out>/planned.json     everything `runs resume` needs to continue a stopped run
    <out>/junit/           the test processes' JUnit files
    <out>/work/<run>/      the run's work: `trace-ids.txt`, and a folder per shard
    <out>/work/<run>/<shard>/   a shard's test processes' files (`shard-<i>`, `base`)

Pure paths: nothing here reads or writes a file. A work-stealing runner's token
(`shard-0.steal1`) is the pool's, not a shard name: it names files inside its shard's folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workflows.run.run_model import PLANNED_FILE, RunRequest
from workflows.tracing.trace_store import TRACE_FILE, TRACE_IDS

PLAN_FILE = "plan.json"
WORK = "work"
JUNIT = "junit"
BASE_SHARD = "base"  # the shard of the A/B comparison's runs on the base torch
# The shard of a scheduled run on a build: its failures run again on the installed torch,
# the torch the bundled expectations and History's baseline were written for.
REFERENCE_SHARD = "reference"
RERUN_SHARD = "rerun"  # stage 4's reruns of failures (`verification.verify`)


def shard_name(index: int) -> str:
    """The name (and work folder) of the plan's shard `index`."""
    return f"shard-{index}"


def work_root(out_dir: str | Path) -> Path:
    """Every run's work under an out directory (the upgrade run keeps its versions' here)."""
    return Path(out_dir) / WORK


def junit_dir(out_dir: str | Path) -> Path:
    """The JUnit files of the runs written into an out directory."""
    return Path(out_dir) / JUNIT


@dataclass(frozen=True)
class RunLayout:
    """The files of run `run_id` in `out_dir`."""

    out_dir: Path
    run_id: str

    @classmethod
    def of(cls, request: RunRequest) -> RunLayout:
        return cls(Path(request.out_dir), request.run_id)

    @property
    def plan_file(self) -> Path:
        return self.out_dir / PLAN_FILE

    @property
    def planned_file(self) -> Path:
        return self.out_dir / PLANNED_FILE

    @property
    def junit(self) -> Path:
        return junit_dir(self.out_dir)

    @property
    def work(self) -> Path:
        """This run's work: nothing another run wrote is ever read as ours."""
        return work_root(self.out_dir) / self.run_id

    @property
    def trace_ids(self) -> Path:
        """The ids this run's shards trace (`workflows.tracing.trace_store.refresh_ids`)."""
        return self.work / TRACE_IDS

    @property
    def stale(self) -> tuple[Path, ...]:
        """What an earlier, finished run left in the out directory that a new run clears."""
        return (work_root(self.out_dir), self.junit)

    def shard(self, name: str) -> Path:
        """A shard's files: `name` is `shard_name(i)`, `BASE_SHARD` or `REFERENCE_SHARD`."""
        return self.work / name

    def shard_names(self, count: int) -> list[str]:
        return [shard_name(i) for i in range(count)]

    def started_files(self, file: str) -> list[Path]:
        """Each shard's `file` (one per shard folder that has it)."""
        return sorted(self.work.glob(f"*/{file}"))

    def trace_files(self) -> list[Path]:
        """What the run's shards traced: each runner's `*trace.ndjson` in its shard's folder."""
        return sorted(self.work.glob(f"*/*{TRACE_FILE}"))
