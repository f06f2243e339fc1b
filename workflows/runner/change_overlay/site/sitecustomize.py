"""Started by Python when this folder is on PYTHONPATH (test processes of a run that applies
a change): applies the change named by $SPYRE_CI_CHANGE before anything imports torch (its
finder's `activate` is handed the activation file) and has each changed module write when its
import starts and ends (`workflows.runner.change_imports.watch`: a changed module is
untrusted code, and the runner must tell a hang, a kill or an error in its import from the
tool's own faults), and
then calls `activate()` of the module $SPYRE_CI_OVERLAY_MODULE names, when it names one (the
selection benchmark names its mutation overlay there and puts its folder on PYTHONPATH: the
product imports no benchmark code). Does nothing without those variables."""

import os

_ACTIVATIONS = [("SPYRE_CI_CHANGE", "workflows.runner.change_overlay.finder")]
if os.environ.get("SPYRE_CI_OVERLAY_MODULE"):
    _ACTIVATIONS.append(("SPYRE_CI_OVERLAY_MODULE", os.environ["SPYRE_CI_OVERLAY_MODULE"]))

for _var, _module in _ACTIVATIONS:
    _value = os.environ.get(_var)
    if _value:
        try:
            import importlib

            _activate = importlib.import_module(_module).activate
            if _var == "SPYRE_CI_CHANGE":
                _finder = _activate(_value)  # the change's activation file
                if _finder is not None:
                    _imports = importlib.import_module("workflows.runner.change_imports")
                    _log_var = _imports.IMPORTS_VAR
                    _imports.watch(_finder, lambda name=_log_var: os.environ.get(name, ""))
            else:
                _activate()
        except Exception as exc:  # noqa: BLE001 - any failure must stop the process, loudly
            # Python would report a failing sitecustomize and go on without the change: the
            # run would test the unchanged torch while looking fine.
            import sys

            print(
                f"spyre-ci: the change could not be applied ({_var}): {type(exc).__name__}: {exc}",
                file=sys.stderr,
                flush=True,
            )
            os._exit(70)


def _chain() -> None:
    """The `sitecustomize` this one shadows (the user's, further on the path) runs too, as it
    does on the A/B's base side where this folder is not on the path; a failing one is said
    and the process goes on, as Python does with its own."""
    import importlib.machinery
    import importlib.util
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - as Python treats a failing sitecustomize
        print(f"Error in sitecustomize ({spec.origin}); set PYTHONVERBOSE for traceback:\n"
              f"{type(exc).__name__}: {exc}", file=sys.stderr)  # fmt: skip


_chain()
