"""Wall time of `spyre-ci bisect` on a window of 5 commits served by a local GitHub (4 Python
commits, the third breaking glu, then a C++ commit): the whole command, its points and runs.

    python benchmarks/bisect_window.py [--repeat N] [--out benchmarks/results/bisect.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.servers.github_api import GitHubAPIServer  # noqa: E402
from tests.workflows.conftest import GLU_SPEC  # noqa: E402
from tests.workflows.drivers.test_bisect import (  # noqa: E402
    BASE,
    BREAK_GLU,
    GLU,
    Window,
    _insert_before,
    harmless,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks/results/bisect.json")
    args = parser.parse_args()
    window = Window()
    harmless(window, 1)
    window.python(
        "Reword atleast_1d", torch__functional=_insert_before("def atleast_1d(", "# 1d\n")
    )
    culprit = window.python("Check glu's batch dimension", torch__nn__functional=BREAK_GLU)
    harmless(window, 2)
    window.cpp("Speed up softmax")
    runs = []
    with GitHubAPIServer() as gh:
        bad = window.serve(gh)
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as state:
                env = {
                    **os.environ,
                    "SPYRE_CI_STATE_DIR": state,
                    "SPYRE_CI_GITHUB_URL": gh.url,
                    "SPYRE_CI_GITHUB_TOKEN": gh.token,
                }
                started = time.monotonic()
                done = subprocess.run(
                    [sys.executable, "-m", "workflows", "bisect", "--specs", str(GLU_SPEC),
                     "--last-good", BASE, "--first-bad", bad, "--variant", GLU, "--json"],
                    cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False,
                )  # fmt: skip
                wall = time.monotonic() - started
            found = json.loads(done.stdout)["variants"][GLU] if done.returncode == 0 else {}
            steps = found.get("steps", [])
            runs.append(
                {
                    "wall_s": round(wall, 2),
                    "exit": done.returncode,
                    "right_culprit": found.get("culprit", {}).get("sha") == culprit,
                    "points": len(steps),
                    "test_processes": sum(len(s["runs"]) for s in steps),
                }
            )
    walls = [r["wall_s"] for r in runs]
    result = {
        "what": "spyre-ci bisect over a 5-commit window (culprit the 3rd, a C++ commit last), "
        "1 variant, warm runner",
        "command": f"python benchmarks/bisect_window.py --repeat {args.repeat}",
        "date": dt.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "notes": "each point starts its own zygote (its torch differs)",
        },
        "median_wall_s": round(statistics.median(walls), 2),
        "per_point_s": round(statistics.median(walls) / max(1, runs[0]["points"]), 2),
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0 if all(r["right_culprit"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
