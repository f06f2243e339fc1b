"""benchmarks/test_suite_cpu.py: processes sorted by kind, zygote warm-ups counted by key."""

from __future__ import annotations

import sys

from tests.testing.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))

from benchmarks import test_suite_cpu as bench  # noqa: E402

PY = "/r/.venv/bin/python"
ZYGOTE = f"{PY} -m workflows.runner.zygote_process /w/0123456789abcdef/socket suites.pytest_plugin "


def test_each_process_is_of_its_kind() -> None:
    assert bench.kind(ZYGOTE + "--idle=600 --pad=...") == "zygotes (warm-ups, keepers)"
    assert bench.kind(f"{PY} -u -c import sys;exec(eval(sys.stdin.readline())) ").startswith(
        "xdist workers"
    )
    forked = f"{PY} -m pytest -c /dev/null -p suites.pytest_plugin --spyre-ids ids.txt -q "
    assert bench.kind(forked) == "test processes (forked or cold)"
    assert bench.kind(f"{PY} -m pytest -q -n 0 tests/x.py ") == "other pytest processes"
    assert bench.kind(f"{PY} -m workflows run --diff p ") == "spyre-ci run"
    assert bench.kind("/r/.venv/bin/spyre-ci runs list ") == "spyre-ci runs"
    assert bench.kind(f"{PY} -m workflows --no-progress serve ") == "spyre-ci serve"
    assert bench.kind("redis-server *:6379 ") == "redis-server"
    assert bench.kind(f"{PY} -c import torch ") == "python -c subprocesses"
    assert bench.kind("/usr/sbin/nats-server ") == "other"
    assert bench.kind(f"{PY} -B -m workflows.cli.warm_process /w/f ").startswith("warm spyre-ci")


def test_warm_ups_are_counted_by_key_and_keepers_are_not() -> None:
    seen = {
        (1, 1): (8.0, ZYGOTE + "--idle=600"),
        (2, 5): (0.1, ZYGOTE + "--idle=600"),  # its keeper
        (3, 9): (7.5, ZYGOTE + "--idle=600"),  # the same key warmed again later
        (4, 9): (2.0, f"{PY} -c import torch "),
    }
    summary = bench.summarize(seen)
    assert summary["cpu_s"] == 17.6
    assert summary["zygote_warm_ups"] == 2
    again = summary["zygote_keys_warmed_again"]
    assert list(again) == ["0123456789abcdef"] and again["0123456789abcdef"]["times"] == 2
    assert again["0123456789abcdef"]["zygote"].startswith("workflows.runner.zygote_process /w/")
    zygotes = summary["by_kind"]["zygotes (warm-ups, keepers)"]
    assert zygotes == {"cpu_s": 15.6, "share": 0.886, "processes": 3}
