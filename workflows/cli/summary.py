"""What a finished run prints: the torch under test, the counts, the new failures (each with
its outcome without the change), what fails on the torch itself, faults, and what to do next.
`spyre-ci run` and `spyre-ci runs resume` print it."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

from contracts.run_summary import RunResults
from contracts.tested import Tested

if TYPE_CHECKING:
    from workflows.run.run_model import EnvironmentUnderTest, FinishedRun


def under_test_lines(resolved: EnvironmentUnderTest | None) -> list[str]:
    """The terminal's first lines of a run: which torch and backend it ran on, what of the
    change was applied, and whether that tested the change (`resolved`: the planned run's
    `EnvironmentUnderTest`, None for a run planned before it was recorded)."""
    if resolved is None:
        return []
    torch, backend, change = resolved.torch, resolved.backend, resolved.change
    lines = [
        f"torch {torch.version} ({torch.git_sha[:12]}, {torch.source}); backend "
        f"{backend.package} {backend.version} on device {backend.device!r}"
    ]
    for files, label in ((change.applied, "applied"), (change.not_applied, "NOT applied")):
        for entry in files[:10]:
            lines.append(f"  {label}: {entry.path} ({entry.why})")
        if len(files) > 10:
            lines.append(f"  {label}: ... and {len(files) - 10} more (see run.json)")
    if resolved.tested is not None:  # a planned.json from before the verdict was kept: none
        lines.append(f"change {_HEADS[resolved.tested]}" + (":" if resolved.notes else ""))
        lines += [f"  {note}" for note in resolved.notes]
    return lines


_HEADS = {
    Tested.TESTED: "TESTED",
    Tested.PARTIAL: "TESTED IN PART",
    Tested.NOT_TESTED: "NOT TESTED",
}


def one_line(message: str, width: int = 120) -> str:
    """A failure's message as one terminal line: its first line naming an exception, else its
    first line that is no traceback frame, cut at a word with `...` past `width`."""

    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    raised = re.compile(r"^(E\s+)?[A-Za-z_][\w.]*(Error|Exception|Failure|Exit|Interrupt)\b")
    plain = [ln for ln in lines if not ln.startswith(("Traceback", "File ", "^"))]
    said = next((ln for ln in lines if raised.match(ln)), plain[0] if plain else "")
    if len(said) <= width:
        return said
    cut = said[: width - 3]
    space = cut.rfind(" ")
    return (cut[:space] if space > width // 2 else cut).rstrip(" ,;:") + "..."


def print_summary(finished: FinishedRun) -> None:
    plan, summary = finished.planned.plan, finished.summary
    results = summary.results or RunResults()
    print(f"\nrun {finished.planned.request.run_id}  ({summary.event})")
    for line in under_test_lines(finished.planned.environment):
        print(f"  {line}")
    if plan.fallback:
        unbounded = plan.budget.not_applied
        print(f"  full run: {plan.fallback}" + (f" ({unbounded})" if unbounded else ""))
    elif plan.decision == "none":
        print(f"  nothing to run: {results.why or 'no variant is affected'}")
    holdout = len(finished.planned.holdout)
    print(f"  selected {len(plan.selected)}, holdout {holdout}, ran {results.ran}")
    impact = finished.planned.notes.impact_map
    if impact is not None:
        print(
            f"  impact map: {impact.path} ({impact.inventory_variants_traced} of the "
            "inventory's variants traced)"
        )
    width = max((len(k) for k in results.counts), default=6)
    for status, count in sorted(results.counts.items(), key=lambda kv: -kv[1]):
        print(f"  {status:<{width}}  {count:>6}")
    new = finished.new_failures
    base = finished.base_outcomes
    side = f"on {finished.reference}" if finished.reference else "without the change"
    if new:
        print(f"  NEW FAILURES ({len(new)}):")
        for vid in new[:20]:
            read = finished.base_read.get(vid)
            how = f", read from run {read}" if read else ", run now"
            without = f" [{side}: {base[vid].status}{how}]" if vid in base else ""
            print(f"    {vid}{without}: {one_line(finished.outcomes[vid].message)}")
        if len(new) > 20:
            print(f"    ... and {len(new) - 20} more (see the report)")
    own = [v for v in finished.unattributed if v in finished.outcomes]
    if own:
        environment = finished.planned.environment
        torch = (
            f"torch {environment.torch.version} ({environment.torch.git_sha[:12]})"
            if environment is not None
            else "the torch under test"
        )
        why = (
            "the change was not applied"
            if finished.not_tested
            else "no run without the change showed them passing"
            if not finished.reference
            else f"not on {finished.reference}: new on this torch"
        )
        print(f"  FAILING ON {torch} ITSELF ({len(own)}; {why}; not blamed on anything):")
        for vid in own[:20]:
            print(f"    {vid}: {one_line(finished.outcomes[vid].message)}")
        if len(own) > 20:
            print(f"    ... and {len(own) - 20} more (see the report)")
    for fault in finished.faults:
        print(f"  INFRASTRUCTURE ERROR (not a test result): {fault.summary}")
        for line in fault.cause.splitlines()[-12:]:
            print(f"    | {line}")
    if finished.faults:
        print("  History learned nothing from this run; fix the cause and run it again.")
    if finished.held_back:
        run_id = finished.planned.request.run_id
        print(f"  HELD BACK from History: {finished.held_back}")
        print(
            f"    if these failures are real: `spyre-ci history confirm {run_id}`; if they "
            f"are the tool's: `spyre-ci history forget {run_id}`"
        )
    windows = summary.forensics.windows() if summary.forensics is not None else []
    if windows and not finished.faults:
        print(
            f"  next: `spyre-ci bisect --run {finished.planned.request.run_id}` names the "
            f"upstream commit in the window of {len(windows)} new failure(s), without a build"
        )
    out = finished.out_dir
    print(f"  report: {out / 'report.html'}  ({out / 'report.md'})")
    sys.stdout.flush()
