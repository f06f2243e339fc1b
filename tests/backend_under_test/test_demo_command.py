"""`spyre-ci demo` and `spyre-ci device info`."""

from __future__ import annotations

import json

import pytest

from workflows.cli.commands.device import demo_results
from workflows.cli.main import main


def test_demo_runs_on_the_device_and_matches_cpu() -> None:
    results = demo_results()
    assert results["device"] == "spyre:0"
    assert results["compiled_device"] == "spyre:0"
    assert results["tensor_is_plain"] is True
    assert results["elementwise_max_abs_diff_vs_cpu"] == 0.0
    assert results["model_weights_max_abs_diff_vs_cpu"] < 1e-3
    assert results["compiled_max_abs_diff_vs_cpu"] < 1e-2
    stats = results["stats"]
    assert stats["compiled_graphs"] >= 1 and stats["fp16_compute_ops"] > 0
    assert stats["estimated_kernel_time_us"] > 0


def test_device_info_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["device", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["device"] == "spyre:0"
    assert info["properties"]["cores"] == 32
    assert "pow" in info["unlowerable_ops"]
