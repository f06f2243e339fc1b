"""Work stealing: an idle runner takes the tail of a running shard, and each variant runs once.

Real pytest processes (forked from a warm zygote) over real suites; the claims folder is
the only coordination between them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from suites.claims import Claims
from suites.model import Inventory, Outcome, Status
from suites.results_file import read_outcomes
from tests.testing.paths import SLOW_SPEC, SLOW_STEPS, TINY_SPEC
from workflows.runner import zygote
from workflows.runner.shard_runner import PLUGIN, ProgressCallback, ShardRun, run_shard
from workflows.runner.stealing import run_pool


def _ids(inventory: Path) -> list[str]:
    return sorted(v.id for v in Inventory.load(inventory).variants)


@pytest.mark.long
def test_a_variant_claimed_by_another_runner_is_left_to_it(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    ids = _ids(tiny_inventory)[:4]
    folder = tmp_path / "claims"
    folder.mkdir()
    theirs = Claims(folder, "shard-0.steal1")
    assert theirs.take(ids[3]) and theirs.take(ids[1])
    ran = run_shard(
        "shard-0", ids, tmp_path / "owner", specs=[str(TINY_SPEC)], claims=Claims(folder, "shard-0")
    )
    assert ran.fault is None
    assert sorted(o.id for o in ran.outcomes) == sorted([ids[0], ids[2]])
    assert Claims(folder, "x").holder(ids[0]) == "shard-0"
    # Everything taken: the process runs nothing, and that is not a fault.
    rest = run_shard(
        "shard-1", ids, tmp_path / "late", specs=[str(TINY_SPEC)], claims=Claims(folder, "shard-1")
    )
    assert rest.fault is None and rest.outcomes == []
    # A fresh process of the same runner (after a crash) may run what it had taken.
    again = run_shard(
        "shard-0",
        ids[:1],
        tmp_path / "retry",
        specs=[str(TINY_SPEC)],
        claims=Claims(folder, "shard-0"),
    )
    assert [o.id for o in again.outcomes] == ids[:1]


@pytest.fixture()
def warm_slow_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TORCH_ROOT", str(SLOW_STEPS))
    zygote.prestart(PLUGIN, [str(SLOW_SPEC)])
    yield
    zygote.stop_all()


@pytest.mark.long
def test_an_idle_runner_steals_the_tail_of_the_longest_shard_and_each_variant_runs_once(
    slow_inventory: Path, tmp_path: Path, warm_slow_steps: None
) -> None:
    ids = _ids(slow_inventory)  # twelve one-second tests
    long, short = ids[:10], ids[10:11]
    seen: list[Outcome] = []

    def run(name: str, part: Sequence[str], claims: Claims, report: ProgressCallback) -> ShardRun:
        result = run_shard(
            claims.token,
            part,
            tmp_path / name,
            specs=[str(SLOW_SPEC)],
            progress=report,
            claims=claims,
            warm=True,
        )
        return ShardRun(result.outcomes, result.fault)

    pooled = run_pool(
        [("shard-0", long, 10.0), ("shard-1", short, 1.0)],
        run,
        2,
        tmp_path,
        warm=True,
        stop=threading.Event(),
        progress=seen.append,
    )
    # Every variant reported once, by exactly one runner; all passed.
    assert Counter(o.id for o in pooled.outcomes) == Counter(long + short)
    assert sorted(o.id for o in seen) == sorted(long + short)
    assert {o.status.value for o in pooled.outcomes} == {"passed"}
    assert [(s.victim, s.thief) for s in pooled.steals][:1] == [("shard-0", "shard-0.steal1")]
    # The thief wrote into the shard's folder under its own token, from the back.
    folder = tmp_path / "shard-0"
    owner = read_outcomes(sorted(folder.glob("shard-0.[0-9]*.jsonl")))
    thief = read_outcomes(sorted(folder.glob("shard-0.steal1.*.jsonl")))
    assert owner and thief and not set(owner) & set(thief)
    assert long[-1] in thief and long[0] in owner
    # What a resumed run reads for the shard: each of its variants once.
    assert sorted(read_outcomes(sorted(folder.glob("*.jsonl")))) == sorted(long)
    assert not list(tmp_path.glob("claims-*"))  # the claims folder goes with the pool


def test_a_pool_steals_nothing_when_the_tail_is_worth_less_than_a_process_start(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    ids = _ids(tiny_inventory)[:3]
    calls: list[str] = []

    def run(name: str, part: Sequence[str], claims: Claims, report: ProgressCallback) -> ShardRun:
        calls.append(claims.token)
        return ShardRun([Outcome(v, Status.PASSED, 0.01) for v in part])

    pooled = run_pool(
        [("shard-0", ids, 0.03), ("shard-1", [], 0.0)],
        run,
        2,
        tmp_path,
        warm=False,
        stop=threading.Event(),
        done={"shard-0": ids[:1]},
    )
    assert calls == ["shard-0"] and pooled.steals == []
    assert [o.id for o in pooled.outcomes] == ids[1:]  # what a resumed run already had is not run
