"""`spyre-ci demo` and `spyre-ci device info`: the bundled emulated Spyre device at work.

torch is imported inside the command functions only: building the CLI must stay cheap.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.errors import CommandError
from workflows.settings import Settings


def register(subparsers: Any) -> None:
    """Add `demo` and `device info`."""
    demo = subparsers.add_parser(
        "demo",
        help="run tensors, a model step and a compiled function on the emulated spyre device",
        description="Create tensors on the emulated Spyre device, train one step of a small "
        "model, run a compiled function, and print results against CPU and the "
        "device counters.",
    )
    demo.add_argument("--json", action="store_true", help="print one JSON document instead")
    demo.add_argument(
        "--permissive",
        action="store_true",
        help="turn the Spyre rules off (same as SPYRE_EMU_PERMISSIVE=1)",
    )
    demo.set_defaults(func=run_demo)

    device = subparsers.add_parser("device", help="the emulated spyre device")
    sub = device.add_subparsers(dest="device_command", metavar="SUBCOMMAND")
    info = sub.add_parser("info", help="device properties, rules and counters")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=run_info)
    device.set_defaults(func=_device_usage(device))


def _device_usage(parser: argparse.ArgumentParser) -> Any:
    def usage(args: argparse.Namespace, _settings: Settings) -> int:
        parser.print_help()
        return ExitCode.BAD_INPUT  # no subcommand: a usage error, as argparse's

    return usage


def _load_device() -> Any:
    import torch

    import backend_under_test

    backend_under_test.register()
    # torch.spyre exists once the backend registers (PrivateUse1, at run time): torch's
    # stubs cannot know it.
    if not torch.spyre.is_available():  # type: ignore[attr-defined]
        raise CommandError("the spyre device did not register; run `pip install -e .` again")
    return torch


def _max_abs_diff(a: Any, b: Any) -> float:
    return float((a.detach().cpu().float() - b.detach().cpu().float()).abs().max())


def demo_results(permissive: bool = False) -> dict[str, Any]:
    """Run the demo and return what it found (the command prints this)."""
    torch = _load_device()
    from backend_under_test import rules

    previous = rules.set_permissive(permissive) if permissive else rules.SWITCHES.permissive
    try:
        torch.spyre.reset_stats()
        torch.manual_seed(0)
        x_host = torch.randn(16, 32)
        x = x_host.to("spyre")
        elementwise = (x * 2 + 1).relu().sum(dim=1)

        model_host = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)
        )
        model = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)
        )
        model.load_state_dict(model_host.state_dict())
        model = model.to("spyre")
        target_host = torch.randn(16, 4)
        losses = []
        for net, data, target in (
            (model_host, x_host, target_host),
            (model, x, target_host.to("spyre")),
        ):
            optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
            loss = torch.nn.functional.mse_loss(net(data), target)
            loss.backward()
            optimizer.step()
            losses.append(loss)
        weight_diff = max(
            _max_abs_diff(a, b)
            for a, b in zip(model.parameters(), model_host.parameters(), strict=True)
        )

        def step(t: Any) -> Any:
            return torch.softmax(t @ t.T, dim=-1) + t.pow(2).sum()  # pow(2) -> t * t

        compiled = torch.compile(step, backend="spyre")(x)
        compiled_host = step(x_host)
        return {
            "device": str(x.device),
            "tensor_is_plain": type(x) is torch.Tensor,
            "elementwise_max_abs_diff_vs_cpu": _max_abs_diff(
                elementwise, (x_host * 2 + 1).relu().sum(1)
            ),
            "model_loss_spyre": float(losses[1].detach()),
            "model_loss_cpu": float(losses[0].detach()),
            "model_weights_max_abs_diff_vs_cpu": weight_diff,
            "compiled_device": str(compiled.device),
            "compiled_max_abs_diff_vs_cpu": _max_abs_diff(compiled, compiled_host),
            "note": "differences come from fp16-class compute of matmul-family ops and softmax",
            "stats": torch.spyre.stats(),
        }
    finally:
        rules.set_permissive(previous)


def run_demo(args: argparse.Namespace, _settings: Settings) -> int:
    """`spyre-ci demo`."""
    results = demo_results(permissive=args.permissive)
    if args.json:
        print(json.dumps(results, indent=2, default=str))
        return ExitCode.OK
    stats = results.pop("stats")
    print(f"device: {results['device']} (plain torch.Tensor: {results['tensor_is_plain']})")
    print(f"elementwise vs CPU: max |diff| {results['elementwise_max_abs_diff_vs_cpu']:.3g}")
    print(
        f"model step: loss {results['model_loss_spyre']:.5f} on spyre, "
        f"{results['model_loss_cpu']:.5f} on CPU; weights max |diff| "
        f"{results['model_weights_max_abs_diff_vs_cpu']:.3g}"
    )
    print(
        f"compiled fn (backend='spyre') on {results['compiled_device']}: max |diff| vs CPU "
        f"{results['compiled_max_abs_diff_vs_cpu']:.3g}"
    )
    print(f"({results['note']})")
    print("torch.spyre.stats():")
    for key, value in stats.items():
        if key == "ops_by_name":
            top = ", ".join(f"{name} {count}" for name, count in list(value.items())[:8])
            print(f"  {key}: {top}{', ...' if len(value) > 8 else ''}")
        else:
            print(f"  {key}: {value}")
    return ExitCode.OK


def run_info(args: argparse.Namespace, _settings: Settings) -> int:
    """`spyre-ci device info`."""
    torch = _load_device()
    from backend_under_test import rules

    info = {
        "device": "spyre:0",
        "properties": torch.spyre.get_device_properties(),
        "device_count": torch.spyre.device_count(),
        "permissive": rules.SWITCHES.permissive,
        "fp16_compute_ops": sorted(rules.FP16_COMPUTE_OPS),
        "unlowerable_ops": sorted(rules.UNLOWERABLE_OPS),
        "torch": torch.__version__,
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            print(f"{key}: {value}")
    return ExitCode.OK
