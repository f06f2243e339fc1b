"""What a zygote imports at warm-up beyond torch and the test databases, so that its forks
need not: the pytest plugins every child's configuration loads, and torch.compile's modules
(`workflows.runner.zygote_process` calls both, in the order a cold test process meets them).

Only imports: nothing here configures pytest or compiles, so a fork starts from the state a
cold process has once it has imported the same modules.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import traceback


def pytest_plugins(autoload: bool) -> None:
    """Import the plugin modules every child's `pytest.main` loads when it configures:
    pytest's own and, when it `autoload`s them (no `PYTEST_DISABLE_PLUGIN_AUTOLOAD` in its
    environment), the installed ones (the `pytest11` entry points). A cold process imports
    them where this does: around the plugin, before torch. Only the modules: each child
    still registers and configures them as a cold one does (25 ms of its configuration
    here, about half). A module that fails is logged, and the children import it
    themselves, as a cold process would."""
    import importlib.metadata

    from _pytest import config

    names = [f"_pytest.{name}" for name in getattr(config, "default_plugins", ())]
    if autoload:
        with contextlib.suppress(Exception):
            names += [ep.module for ep in importlib.metadata.entry_points(group="pytest11")]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the children import it as a cold process would
            traceback.print_exc()


# torch.compile's own modules: a test process pays about 2 s to import them at its first
# compiled test (dynamo, aot_autograd, which the backend's compiler uses).
COMPILE_STACK = ("torch._dynamo", "torch._dynamo.backends.common", "torch._functorch.aot_autograd")
# And what the first compile of a test process imports beyond them on torch 2.13 (0.14 s
# here; the first `torch.compile(backend="spyre")` of a fork took 0.27 s without them,
# 0.12 s with them, and any later one 0.07 s). Private names: a torch that lacks one
# has nothing of it to preload.
FIRST_COMPILE = (
    "torch._inductor.debug",
    "torch.distributed.tensor.experimental._func_map",
    "torch._dynamo.repro.after_dynamo",
    "torch.export._trace",
)


def compile_stack() -> None:
    """Import torch.compile's modules once here, for every child (the zygote asks only when
    its suites may compile: `suites.pytest_plugin.compiles`), unless a run's change has
    modules not imported yet (or deletes one): their import, and what it does, must happen
    where a cold test process would meet it, in the tests that compile, never in the
    zygote's warm-up, where it would be every test's failure. A failure here is logged, and
    the children import what is missing themselves."""
    for finder in sys.meta_path:
        changed = getattr(finder, "_modules", None)
        deleted = getattr(finder, "_deleted", None)
        if isinstance(changed, dict) and (deleted or any(m not in sys.modules for m in changed)):
            return
    try:
        for name in COMPILE_STACK:
            importlib.import_module(name)
    except Exception:  # noqa: BLE001 - the children import it as a cold process would
        traceback.print_exc()
        return
    for name in FIRST_COMPILE:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            continue  # another torch: nothing of it to preload
        except Exception:  # noqa: BLE001 - the children import it as a cold process would
            traceback.print_exc()
