"""pytest plugin that runs suite variants on `spyre`.

Long on purpose: pytest loads a plugin as one module (`-p suites.pytest_plugin`) and finds its
hooks on it; the hooks, the items and the per-session state (`_State`) they share belong
together, and a split would only move hooks behind imports pytest does not see.

Load it explicitly (it is not an auto-loaded entry point):

    python -m pytest -p suites.pytest_plugin --spyre-ids IDS.txt [--spyre-specs PATH ...]
        [--spyre-results OUT.jsonl] [--spyre-timeout SECONDS] --junitxml OUT.xml -q

When loaded, the plugin owns collection: it collects exactly the variants named in
`--spyre-ids` (all variants of the specs without it) and nothing from the file system.
Expectations become skip / xfail / strict xfail marks; each test gets a timeout (SIGALRM) for
Python-level hangs; `--spyre-results` gets one JSON line before and after each test, flushed,
so a runner can attribute a crash of the whole process to the last unmatched `start`.

An id of the ids file that a loaded suite no longer has (upstream dropped it) is not run: it
gets one `end` line with status `removed` (no `start`) before the first test, and the rest
runs. An id whose suite is not loaded, refused or unavailable here is a usage error instead.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
from collections.abc import Collection, Generator, Mapping
from pathlib import Path
from typing import IO, Any

import pytest

from suites.backend import backend_package, device_name
from suites.claims import Claims
from suites.model import Expectation, Outcome, Status
from suites.results_file import MESSAGE_LIMIT, clip_message, end_line, fault_line, start_line

# The device under test (`suites.backend`: the bundled `spyre` unless configured), read once
# by each test process.
DEVICE = device_name()
REMOVED_MESSAGE = (
    "not in the loaded specs: the variant no longer exists (upstream dropped its dtype, "
    "OpInfo, module or test); rebuild the Inventory to stop planning it"
)
_STATE = pytest.StashKey["_State"]()


class VariantTimeout(BaseException):
    """Raised inside a test by the per-test alarm (BaseException: tests must not swallow it)."""


class _State:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: IO[str] | None = None
        self.timeout: float | None = config.getoption("spyre_timeout")
        self.reports: dict[str, list[pytest.TestReport]] = {}
        self.started: dict[str, float] = {}
        self.unavailable: dict[str, str] = {}
        self.removed: list[str] = []  # ids of the ids file the loaded specs no longer have
        # The device-fault guard: failing outcomes are held back until the device's health
        # probe passes (after `BURST` of them, or at the end), or a test passes. None: the
        # probe has not run yet; False: it failed before the first test (the guard is off).
        self.sentinel: bool | None = None
        self.held: list[tuple[str, str]] = []  # (variant id, its end line)
        folder = config.getoption("spyre_claims")
        self.claims = (
            Claims(Path(folder), config.getoption("spyre_claim_as") or "") if folder else None
        )

    def mine(self, vid: str) -> bool:
        """Whether this process may run (or report) `vid`: always, unless claims are kept."""
        return self.claims is None or self.claims.take(vid)

    def emit(self, line: str) -> None:
        """One line of the results file (`suites.results_file`, the format's codec)."""
        if self.results is None:
            return
        self.results.write(line)
        self.results.flush()

    def ended(self, vid: str, status: Status, line: str) -> None:
        """Report an outcome through the device-fault guard."""
        if self.sentinel is None:
            self.sentinel = device_probe() is None
        if status.is_failure and self.sentinel:
            self.held.append((vid, line))
            if len(self.held) >= BURST:
                self.check_device()
            return
        self.release()  # a test passed: the device works
        self.emit(line)

    def release(self) -> None:
        for _vid, line in self.held:
            self.emit(line)
        self.held.clear()

    def check_device(self) -> None:
        """Probe the device: healthy, the held failures are results; not, they are an
        infrastructure fault (said in the results file), and this process ends."""
        reason = device_probe()
        if reason is None:
            self.release()
            return
        self.emit(fault_line(reason, [vid for vid, _line in self.held]))
        sys.stderr.write(f"spyre suites: the device failed its health probe: {reason}\n")
        sys.stderr.flush()
        os._exit(DEVICE_FAULT_EXIT)


BURST = 5  # failures in a row after which the device's health is probed
DEVICE_FAULT_EXIT = 75


def device_probe() -> str | None:
    """None when the device computes a known answer; else what went wrong. The answer is
    computed in plain Python: no CPU kernel (which a test or a benchmark may have changed)
    takes part on the host side."""
    import torch

    try:
        host = torch.arange(16, dtype=torch.float32).reshape(4, 4)
        got = (host.to(DEVICE) * 2 + 1).sum(0).cpu().tolist()
    except Exception as exc:  # noqa: BLE001 - any failure is the answer
        return f"{type(exc).__name__}: {exc}"[:500]
    want = [float(sum(2 * (row * 4 + col) + 1 for row in range(4))) for col in range(4)]
    return None if got == want else f"the device computed {got} where {want} is right"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("spyre", "spyre-ci suite variants")
    group.addoption(
        "--spyre-ids",
        metavar="FILE",
        default=None,
        help="file of variant ids, one per line; collect exactly those",
    )
    group.addoption(
        "--spyre-specs",
        metavar="PATH",
        action="append",
        default=None,
        help="spec file or folder (repeatable); default: the bundled specs",
    )
    group.addoption(
        "--spyre-results",
        metavar="OUT.jsonl",
        default=None,
        help="write start/end JSON lines per test, flushed after each line",
    )
    group.addoption(
        "--spyre-claims",
        metavar="DIR",
        default=None,
        help="claims folder shared with other processes of the shard: run a variant only "
        "once this process holds its claim (suites.claims; work stealing)",
    )
    group.addoption(
        "--spyre-claim-as",
        metavar="TOKEN",
        default="",
        help="the token this process claims as (with --spyre-claims)",
    )
    group.addoption(
        "--spyre-timeout",
        metavar="SECONDS",
        type=float,
        default=None,
        help="per-test timeout; the smaller of this and the variant's timeout_s",
    )


def pytest_configure(config: pytest.Config) -> None:
    state = _State(config)
    config.stash[_STATE] = state
    out = config.getoption("spyre_results")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        state.results = open(out, "a", encoding="utf-8")  # noqa: SIM115 - closed at unconfigure


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None and state.results is not None:
        state.results.close()


def read_ids(path: str | Path) -> list[str]:
    """Variant ids of an ids file (blank lines and `#` comments ignored), in order, unique."""
    ids: list[str] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and line not in ids:
            ids.append(line)
    return ids


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> bool:
    """Collect variants instead of test files."""
    from suites.loader import SpecError
    from suites.model import split_variant_id

    config = session.config
    state = config.stash[_STATE]
    specs_opt = config.getoption("spyre_specs")
    ids_file = config.getoption("spyre_ids")
    wanted = read_ids(ids_file) if ids_file else None
    # A spec that does not lint is refused on its own (as when the Inventory is built): its
    # variants are not in the Inventory, so no shard asks for them.
    specs, refused = _loaded(specs_opt)
    if refused and not specs:
        raise pytest.UsageError("spyre suites do not lint:\n" + "\n".join(refused.values()))
    for path, why in refused.items():
        sys.stderr.write(f"spyre suites: {path}: refused (does not lint):\n{why}\n")
    suites = None
    if wanted is not None:
        bad = [i for i in wanted if i.count("::") < 3]
        if bad:
            raise pytest.UsageError(
                f"{ids_file}: not variant ids (suite::template::subject::"
                f"dtype): {', '.join(bad[:10])}"
            )
        suites = {split_variant_id(i)[0] for i in wanted}
    _ensure_device()
    # The OpInfo subjects the ids name, per suite: a process started cold expands only those.
    wanted_subjects: dict[str, set[str]] | None = None
    if wanted is not None:
        wanted_subjects = {}
        for vid in wanted:
            suite_name, _template, subject, _dtype = split_variant_id(vid)
            wanted_subjects.setdefault(suite_name, set()).add(subject)
    expansion = None
    planned = []
    expanded: set[str] = set()  # suites whose specs expanded: their variants are all known
    for spec in specs:
        if suites is not None and spec.suite_name not in suites:
            continue
        try:
            expansion = _expanded(spec, wanted_subjects)
        except SpecError as exc:  # refused from the Inventory likewise
            sys.stderr.write(f"spyre suites: {spec.path}: refused (does not expand):\n{exc}\n")
            continue
        planned.extend(expansion.planned)
        state.unavailable.update(expansion.unavailable)
        expanded.add(spec.suite_name)
    by_id = {p.variant.id: p for p in planned}
    if wanted is None:
        chosen = planned
    else:
        missing = [i for i in wanted if i not in by_id]
        # An id of a suite that expanded here in full is one upstream no longer has (a dtype
        # dropped from an OpInfo, a test renamed): removed, not a fault. An id of a suite that
        # is unavailable, refused or not loaded says the environment is wrong: a usage error.
        state.removed = [
            vid
            for vid in missing
            if split_variant_id(vid)[0] in expanded
            and split_variant_id(vid)[0] not in state.unavailable
        ]
        unknown = [vid for vid in missing if vid not in state.removed]
        if unknown:
            lines = []
            for vid in unknown[:50]:
                suite = split_variant_id(vid)[0]
                cause = state.unavailable.get(suite)
                if cause:
                    lines.append(f"  {vid}  (suite unavailable: {cause})")
                else:
                    lines.append(f"  {vid}  (suite {suite!r} not loaded)")
            more = f"\n  ... and {len(unknown) - 50} more" if len(unknown) > 50 else ""
            raise pytest.UsageError(
                f"{len(unknown)} unknown variant id(s) in {ids_file} (their suites are not in "
                "the loaded specs; see `spyre-ci suites expand`):\n" + "\n".join(lines) + more
            )
        if not config.option.collectonly:
            for vid in state.removed:
                if state.mine(vid):
                    state.emit(end_line(Outcome(vid, Status.REMOVED, 0.0, REMOVED_MESSAGE)))
        chosen = [by_id[i] for i in wanted if i in by_id]
    session.ihook.pytest_collectstart(collector=session)
    items: list[pytest.Item] = []
    parents: dict[str, SuiteNode] = {}
    for plan in chosen:
        suite = plan.variant.suite
        if suite not in parents:
            parents[suite] = SuiteNode.from_parent(session, name=suite, nodeid=suite)
        items.append(
            VariantItem.from_parent(
                parents[suite],
                name=plan.variant.id,
                nodeid=f"{suite}::{plan.variant.id}",
                plan=plan,
            )
        )
    session.items = items
    # One collect report for the lot: the terminal counts it ("collected N items"), and
    # --collect-only says how many it would run.
    session.ihook.pytest_collectreport(
        report=pytest.CollectReport(session.nodeid, "passed", None, list(items))
    )
    config.hook.pytest_collection_modifyitems(session=session, config=config, items=items)
    config.hook.pytest_collection_finish(session=session)
    session.testscollected = len(session.items)
    return True


# What `preload` loaded and expanded before this process forked (the warm runner's zygote,
# workflows/runner/zygote.py); empty in a process started cold. Keyed by the spec files' text, so a
# session never uses the expansion of specs that changed since.
_PRELOADED: dict[tuple[str, ...], Any] = {}


def preload(specs_opt: list[str] | None) -> None:
    """Load, lint and expand every suite of `specs_opt` now, so that a pytest session in a
    process forked from this one collects without expanding (the expansion and its errors
    are kept, and replayed by `pytest_collection`).

    A file suite over a test file the change under test edits (`$SPYRE_CI_EDITED_TESTS`) is
    left out: each test process expands it, importing the edited file where a cold process
    would, under the test's own timeout, the shard runner's crash handling and its words."""
    from suites.expand import expand, load_suites_each
    from suites.loader import SpecError, edited_tests, reuses_any

    specs, refused = load_suites_each(specs_opt)
    edited = edited_tests()
    expanded: dict[str, Any] = {}
    for spec in specs:
        if edited and reuses_any(spec, edited):
            continue
        try:
            expanded[spec.suite_name] = expand([spec], fingerprints=False)
        except SpecError as exc:
            expanded[spec.suite_name] = exc
    _PRELOADED[_spec_key(specs_opt)] = (specs, refused, expanded)


# Templates whose tests call torch.compile (suites/templates/ops.py).
COMPILING_TEMPLATES = frozenset({"compile"})


def compiles(specs_opt: list[str] | None) -> bool:
    """Whether a test of these suites may call torch.compile: a file suite may (its test
    files are upstream's), an OpInfo entry does when one of its templates compiles (a refused
    spec runs nothing). The warm runner's zygote imports torch.compile's own modules
    (aot_autograd, what a first compile imports; `workflows/runner/warm_imports.py`) for its
    forks only when they may need them."""
    specs, _refused = _loaded(specs_opt)
    for spec in specs:
        block = spec.get(("test_suite_config",)) or {}
        if not isinstance(block, dict) or block.get("files"):
            return True
        for entry in block.get("opinfo") or ():
            templates = entry.get("templates") if isinstance(entry, dict) else None
            if not isinstance(templates, list) or COMPILING_TEMPLATES & set(map(str, templates)):
                return True
    return False


def _spec_key(specs_opt: list[str] | None) -> tuple[str, ...]:
    import hashlib

    from suites.loader import spec_paths

    key = list(specs_opt or ())
    for path in sorted(spec_paths(specs_opt)):
        key.append(f"{path}:{hashlib.sha256(path.read_bytes()).hexdigest()}")
    return tuple(key)


def _loaded(specs_opt: list[str] | None) -> tuple[list[Any], dict[str, str]]:
    from suites.expand import load_suites_each

    preloaded = _PRELOADED.get(_spec_key(specs_opt)) if _PRELOADED else None
    if preloaded is not None:
        return list(preloaded[0]), dict(preloaded[1])
    return load_suites_each(specs_opt)


def _expanded(spec: Any, subjects: Mapping[str, Collection[str]] | None = None) -> Any:
    """The expansion of one suite: preloaded when this process was forked warm, else only
    the OpInfo `subjects` asked for (all of them when None)."""
    from suites.expand import expand

    for specs, _refused, expanded in _PRELOADED.values():
        if any(s is spec for s in specs) and spec.suite_name in expanded:
            found = expanded[spec.suite_name]
            if isinstance(found, Exception):
                raise found
            return found
    return expand([spec], subjects=subjects, fingerprints=False)


def _ensure_device() -> None:
    import torch

    from suites.templates import tracking

    tracking.install()
    if torch._C._get_privateuse1_backend_name() != DEVICE:
        # Not loaded by `import torch` (its entry point, if any): its package registers it.
        package = backend_package()
        try:
            importlib.import_module(package)
        except ImportError as exc:
            raise pytest.UsageError(
                f"the backend under test {package!r} cannot be imported ({exc}): install it, "
                "or set SPYRE_CI_BACKEND to the package that registers the device"
            ) from None
    if torch._C._get_privateuse1_backend_name() != DEVICE:
        raise pytest.UsageError(
            f"the {DEVICE!r} device is not registered: {backend_package()!r} registered "
            f"{torch._C._get_privateuse1_backend_name()!r} (SPYRE_CI_DEVICE names the "
            "device the backend registers; for the bundled one, make sure "
            "TORCH_DEVICE_BACKEND_AUTOLOAD is not 0)"
        )


class SuiteNode(pytest.Collector):
    """Groups the variants of one suite (JUnit classname)."""

    def collect(self) -> list[pytest.Item]:  # pragma: no cover - items are made directly
        return []


class VariantItem(pytest.Item):
    """One variant: a template over a subject and dtype, or one upstream device test."""

    def __init__(self, *, plan: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        variant = plan.variant
        if variant.expectation is Expectation.SKIP:
            self.add_marker(pytest.mark.skip(reason=variant.reason or "skip"))
        elif variant.expectation in (Expectation.XFAIL, Expectation.XFAIL_STRICT):
            self.add_marker(
                pytest.mark.xfail(
                    reason=variant.reason or str(variant.expectation),
                    strict=variant.expectation is Expectation.XFAIL_STRICT,
                    run=True,
                )
            )
        for tag in plan.tags:
            if tag.isidentifier():
                self.add_marker(tag)

    def runtest(self) -> None:
        timeout = _timeout_for(self.plan.variant.timeout_s, self.config.stash[_STATE].timeout)
        with _alarm(timeout) as alarm:
            try:
                skip_message = run_variant(self.plan)
            except BaseException:
                # unittest (file suites) records any exception, ours included, as an error.
                if alarm.fired:
                    raise VariantTimeout(f"no result after {timeout:g} s") from None
                raise
            if alarm.fired:
                raise VariantTimeout(f"no result after {timeout:g} s")
        if skip_message is not None:
            if self.plan.variant.expectation in (Expectation.XFAIL, Expectation.XFAIL_STRICT):
                # As in torch-spyre: a skip inside an xfail counts as the expected failure.
                raise AssertionError(f"skipped inside xfail: {skip_message}")
            pytest.skip(skip_message)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        rule = self.plan.variant.rule
        path, _, line = rule.partition(":")
        line_no = int(line.split()[0]) - 1 if line.split() and line.split()[0].isdigit() else None
        return Path(path or "suites"), line_no, self.plan.variant.id

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | Any:
        if excinfo.errisinstance(VariantTimeout):
            return f"timeout: {excinfo.value}"
        if excinfo.errisinstance(AssertionError):
            return f"{excinfo.typename}: {excinfo.value}"
        # Native: Python's own traceback text. pytest's other styles parse the source file
        # of every frame with `ast` (torch's OpInfo database among them): a failure cost
        # about three times a pass; native costs what a pass does.
        return super().repr_failure(excinfo, style="native")


def run_variant(plan: Any) -> str | None:
    """Run one planned variant; returns a skip message, raises on failure."""
    if plan.kind == "file":
        from suites.upstream import run_upstream_test

        precision = plan.precision
        outcome = run_upstream_test(
            plan.file,
            plan.device_class,
            plan.method,
            cpu_move=plan.cpu_move,
            no_grad=plan.no_grad,
            atol=precision.atol if precision else None,
            rtol=precision.rtol if precision else None,
            widening=plan.widening,
        )
        if outcome.status in ("failed", "error"):
            raise AssertionError(outcome.message.strip())
        if outcome.status == "skipped":
            return outcome.message or "skipped by the upstream test"
        if outcome.status == "xfailed":
            pytest.xfail(f"upstream expectedFailure: {outcome.message.strip()[-300:]}")
        return None
    from suites.templates import Context, get_template
    from suites.templates.modules import NoModuleInputs
    from suites.templates.ops import NoSamples

    precision = plan.precision
    ctx = Context(
        atol=precision.atol if precision else None,
        rtol=precision.rtol if precision else None,
        max_samples=plan.max_samples,
        template=plan.variant.template,
    )
    try:
        get_template(plan.variant.template)(plan.info, plan.dtype, DEVICE, ctx)
    except (NoSamples, NoModuleInputs) as exc:
        return str(exc)
    return None


def _timeout_for(variant: float | None, option: float | None) -> float | None:
    given = [t for t in (variant, option) if t]
    return min(given) if given else None


class _alarm:  # noqa: N801 - used as a context manager
    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.fired = False

    def __enter__(self) -> _alarm:
        if not self.seconds:
            return self

        def fire(signum: int, frame: Any) -> None:
            self.fired = True
            raise VariantTimeout(f"no result after {self.seconds:g} s")

        self.previous = signal.signal(signal.SIGALRM, fire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.seconds:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(VariantTimeout):
        # A hang is never the expected failure: report it even under xfail.
        report.outcome = "failed"
        if hasattr(report, "wasxfail"):
            del report.wasxfail
        report.spyre_timeout = True  # type: ignore[attr-defined]
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    state = item.config.stash[_STATE]
    if not isinstance(item, VariantItem):
        return (yield)
    vid = item.plan.variant.id
    state.reports[vid] = []
    state.emit(start_line(vid))
    started = time.monotonic()
    try:
        return (yield)
    finally:
        status, message = _status(state.reports.pop(vid, []))
        outcome = Outcome(vid, status, round(time.monotonic() - started, 6), message)
        state.ended(vid, status, end_line(outcome))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """With a claims folder: run each variant only once this process holds its claim; the
    ones another process took are left to it, unreported here. Without: pytest's own loop."""
    state = session.config.stash[_STATE]
    if state.claims is None or session.config.option.collectonly:
        return None
    items = session.items
    for i, item in enumerate(items):
        if isinstance(item, VariantItem) and not state.mine(item.plan.variant.id):
            continue
        nextitem = items[i + 1] if i + 1 < len(items) else None
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _CONFIG.get("config")
    if config is None:
        return
    state = config.stash[_STATE]
    vid = _vid_of(report.nodeid)
    if vid in state.reports:
        state.reports[vid].append(report)
    # JUnit: the test case name is the variant id itself, the classname its suite.
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is not None and vid is not None:
        reporter = xml.node_reporter(report)
        reporter.attrs["name"] = vid
        reporter.attrs["classname"] = vid.split("::", 1)[0]


_CONFIG: dict[str, pytest.Config] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Failures still held at the end are reported once the device passes its probe."""
    state = session.config.stash.get(_STATE, None)
    if state is not None and state.held:
        state.check_device()


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG["config"] = session.config


def _vid_of(nodeid: str) -> str | None:
    # nodeid is `<suite>::<variant id>`; the id starts with the suite again.
    suite, sep, rest = nodeid.partition("::")
    return rest if sep and rest.startswith(suite + "::") else None


def _status(reports: list[pytest.TestReport]) -> tuple[Status, str]:
    by_when = {r.when: r for r in reports}
    setup, call, teardown = by_when.get("setup"), by_when.get("call"), by_when.get("teardown")
    if setup is not None and setup.failed:
        return Status.ERROR, _message(setup)
    if setup is not None and setup.skipped:
        if hasattr(setup, "wasxfail"):
            return Status.XFAILED, str(setup.wasxfail)
        return Status.SKIPPED, _skip_message(setup)
    if call is None:
        return Status.ERROR, "no call phase"
    if getattr(call, "spyre_timeout", False):
        return Status.TIMEOUT, _message(call)
    if call.skipped and hasattr(call, "wasxfail"):
        return Status.XFAILED, _message(call, 1000) or str(call.wasxfail)
    if call.passed and hasattr(call, "wasxfail"):
        return Status.XPASSED, str(call.wasxfail)
    if call.skipped:
        return Status.SKIPPED, _skip_message(call)
    if call.failed:
        return Status.FAILED, _message(call)
    if teardown is not None and teardown.failed:
        return Status.ERROR, _message(teardown)
    return Status.PASSED, ""


def _message(report: pytest.TestReport, limit: int = MESSAGE_LIMIT) -> str:
    return clip_message(report.longreprtext or "", limit)


def _skip_message(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return _message(report)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"spyre suites: variants run on device {DEVICE!r}"]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    state = terminalreporter.config.stash.get(_STATE, None)
    if state is None:
        return
    for suite, why in sorted(state.unavailable.items()):
        terminalreporter.write_line(f"spyre suite {suite!r} unavailable: {why}")
    if state.removed:
        shown = ", ".join(state.removed[:10])
        more = f" and {len(state.removed) - 10} more" if len(state.removed) > 10 else ""
        terminalreporter.write_line(
            f"spyre: {len(state.removed)} variant id(s) removed (not in the loaded specs, "
            f"not run): {shown}{more}"
        )
