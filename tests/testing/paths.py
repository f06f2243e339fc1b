"""Paths of the repository's test data and examples."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY_SPEC = REPO_ROOT / "tests" / "workflows" / "data" / "tiny.yaml"
SLOW_STEPS = REPO_ROOT / "tests" / "e2e" / "data" / "slow_steps"
SLOW_SPEC = SLOW_STEPS / "slow_steps.yaml"  # twelve one-second tests; TORCH_ROOT=SLOW_STEPS
SOFTMAX_PATCH = REPO_ROOT / "examples" / "events" / "push_softmax_kernel.patch"
GLU_SPEC = REPO_ROOT / "tests" / "workflows" / "data" / "glu.yaml"
GLU_PATCH = REPO_ROOT / "examples" / "changes" / "glu_batch_check.patch"
EVENTS = REPO_ROOT / "examples" / "events"
