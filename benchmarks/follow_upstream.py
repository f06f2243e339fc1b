"""Follow upstream: a stream of push events on a simulated upstream, each run on the build of
its base with the upstream drift applied (`docs/workflows.md`, "Following upstream").

The simulated upstream (`tests/testing/simulated_upstream.py`): a nightly made by relabelling
the installed torch's wheel (version 2.16.0.dev20261201, git sha of the history's root),
served from a folder of wheels or a local PEP 503 index, and a local GitHub serving the
history R -> c1 (Python drift) -> c2 (glu breaks, over the drift's line) -> c3 (revert) ->
c4 (C++ only) -> c5 (docs only). Each event runs as `spyre-ci run --event FILE` in a fresh
state directory shared by the stream, with a fresh environment cache.

    .venv/bin/python benchmarks/follow_upstream.py [--index] [--out FILE]

Records per event: exit code, verdict (tested / partial / not_tested), new failures, wall
time, the environment line; and the build's first and cached provisioning.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.servers.wheel_index import WheelIndexServer  # noqa: E402
from tests.testing import simulated_upstream as su  # noqa: E402

# (before, after, what a correct verdict is): exit code, tested state.
STREAM = (
    ("c1", "c2", 1, "tested"),  # glu breaks: red, blamed with A/B evidence
    ("c2", "c3", 0, "tested"),  # the revert, on a base whose drift holds the break: no red
    ("c3", "c4", 4, "not_tested"),  # C++ only: nothing to test now (exit 4), never success
    ("c4", "c5", 0, "partial"),  # docs only, on a base whose drift holds the C++ edit
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--index", action="store_true", help="serve the wheels from a local PEP 503 index"
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks/results/follow_upstream.json"
    )
    parser.add_argument("--work", type=Path, default=None, help="keep the work folder here")
    parser.add_argument(
        "--wheel",
        type=Path,
        default=None,
        help="the nightly of R is this torch wheel relabelled (default: the installed "
        "torch's); e.g. torch 2.14.1 from `pip download --no-deps torch==2.14.1`",
    )
    parser.add_argument(
        "--version", default=su.NIGHTLY, help="the version the nightly of R is labelled with"
    )
    parser.add_argument(
        "--no-next", action="store_true", help="no next nightly: leave the C++ change pending"
    )
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="follow-upstream-"))
    upstream = su.make_history(args.wheel)
    started = time.monotonic()
    wheels = work / "wheels"
    su.make_builds(wheels, upstream, args.wheel, args.version)
    relabel_s = time.monotonic() - started
    server = su.serve(upstream)
    index = WheelIndexServer(wheels).start() if args.index else None
    env = {
        **os.environ,
        "SPYRE_CI_BUILD_INDEX": index.url if index else str(wheels),
        "SPYRE_CI_GITHUB_URL": server.url,
        "SPYRE_CI_GITHUB_TOKEN": server.token,
        "SPYRE_CI_ENV_CACHE": str(work / "envs"),
        "SPYRE_CI_STATE_DIR": str(work / "state"),
    }
    results = []
    try:
        for before, after, want_code, want_tested in STREAM:
            event = su.push_event(work, upstream, before, after)
            out = work / f"out-{before}-{after}"
            began = time.monotonic()
            done = subprocess.run(
                [str(ROOT / ".venv/bin/spyre-ci"), "run", "--event", str(event), "--out", str(out)],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            wall = time.monotonic() - began
            run = _read(out / "run.json")
            environment = (run.get("environment") or {}) if isinstance(run, dict) else {}
            lines = [ln for ln in done.stdout.splitlines() if "torch " in ln or "change " in ln]
            results.append(
                {
                    "event": f"{before}..{after}",
                    "exit_code": done.returncode,
                    "want_exit_code": want_code,
                    "tested": environment.get("tested"),
                    "want_tested": want_tested,
                    "conclusion": _callback_conclusion(out / "callback.json"),
                    **classified(run),
                    "wall_s": round(wall, 1),
                    "lines": lines[:6],
                    "stderr_tail": done.stderr.strip().splitlines()[-3:],
                }
            )
            print(json.dumps(results[-1]), flush=True)
        # The next nightly arrives: the C++ change deferred at c3..c4 is judged on it.
        if not args.no_next:
            su.make_next_build(wheels, upstream)
        began = time.monotonic()
        done = subprocess.run(
            [str(ROOT / ".venv/bin/spyre-ci"), "pending", "check"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        listed = subprocess.run(
            [str(ROOT / ".venv/bin/spyre-ci"), "pending", "list"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        judged = sorted((work / "state" / "pending" / "runs").glob("*/callback.json"))
        callback = _read(judged[0]) if judged else {}
        workflow = callback.get("workflow") if isinstance(callback.get("workflow"), dict) else {}
        deferred = {
            "command": "spyre-ci pending check",
            "callback": {
                "delivery_id": callback.get("delivery_id"),
                **{
                    k: workflow.get(k)
                    for k in ("run_id", "run_attempt", "conclusion", "spyre_run_id")
                    if isinstance(workflow, dict)
                },
            },
            "exit_code": done.returncode,
            "wall_s": round(time.monotonic() - began, 1),
            "stdout": done.stdout.strip().splitlines()[-8:],
            "pending_list": listed.stdout.strip().splitlines(),
        }
        print(json.dumps(deferred), flush=True)
    finally:
        server.stop()
        if index is not None:
            index.stop()
    provisioned = {}
    for marker in sorted((work / "envs").glob("build-*/.spyre-ci-env.json")):
        facts = json.loads(marker.read_text())
        provisioned[facts["torch"]] = facts["created_s"]
    false_tested = sum(
        1 for r in results if r["want_tested"] != "tested" and r["tested"] == "tested"
    )
    false_red = sum(1 for r in results if r["want_exit_code"] != 1 and r["exit_code"] == 1)
    record = {
        "name": "follow_upstream",
        "value": false_tested + false_red,
        "unit": "false verdicts over the stream: a run called tested that was not, or red "
        "without the change's fault",
        "command": " ".join([".venv/bin/python", "benchmarks/follow_upstream.py", *sys.argv[1:]]),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, "
        f"Python {platform.python_version()}, installed torch 2.13.0 CPU; the simulated "
        f"nightly is {(args.wheel or su.WHEEL).name} relabelled {args.version}; load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end",
        "relabel_s": round(relabel_s, 2),
        "provision_first_s": provisioned,
        "deferred": deferred,
        "matched": sum(
            1
            for r in results
            if r["exit_code"] == r["want_exit_code"] and r["tested"] == r["want_tested"]
        ),
        "events": results,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0 if record["value"] == 0 else 1


def classified(run: dict[str, object]) -> dict[str, int]:
    """How many outcomes the run called new failures (the change's, by A/B) and
    pre-existing (failing without the change too: the torch's own)."""
    results = run.get("results")
    rows = [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []
    return {
        "new_failures": sum(1 for r in rows if r.get("classification") == "new"),
        "pre_existing": sum(1 for r in rows if r.get("classification") == "pre-existing"),
    }


def _callback_conclusion(path: Path) -> object:
    workflow = _read(path).get("workflow")
    return workflow.get("conclusion") if isinstance(workflow, dict) else None


def _read(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


if __name__ == "__main__":
    sys.exit(main())
