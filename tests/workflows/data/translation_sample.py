"""Data for test_cli_errors: one handler that only re-raises its error as another type."""


def translated() -> None:
    try:
        pass
    except KeyError as exc:  # a built-in error gets its category: not counted
        raise LookupError(str(exc)) from exc
    except ImportError as exc:
        raise RuntimeError(f"with context: {exc}") from exc  # adds what and where: kept
    except SampleError as exc:  # noqa: F821
        raise RuntimeError(str(exc)) from exc
