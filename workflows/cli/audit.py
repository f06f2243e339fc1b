"""`spyre-ci suites audit`: the edges of `suites.audit`.

Expands the suites (torch), reads what runs saw (History, or `--results` files), gathers the
installed torch's databases and dtypes, and writes the report and the proposed patch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from suites.audit import Facts, Observed, Report
from suites.model import Outcome, Status
from workflows.cli.change_input import check_specs, history_store, read_text
from workflows.errors import CommandError
from workflows.settings import Settings, child_environment
from workflows.stores.sources import work_tree

DATABASES = ("op_db", "python_ref_db", "module_db")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--specs", action="append", metavar="PATH", help="spec file or folder (repeatable)"
    )
    parser.add_argument(
        "--results",
        action="append",
        metavar="FILE",
        help="a run's results instead of History: --spyre-results JSON lines or a run.json "
        "(repeatable, oldest first)",
    )
    parser.add_argument(
        "--since-root",
        metavar="DIR",
        help="the upstream tree the file suites were written against (an older TORCH_ROOT): "
        "tests, classes and OpInfos renamed since then are found on evidence, their entries "
        "follow them (the patch renames them), new tests get a proposed expectation",
    )
    parser.add_argument("--json", action="store_true", help="the report as one JSON object")
    parser.add_argument(
        "--patch",
        metavar="FILE.diff",
        help="write a unified diff removing the xfails that pass and the expectations "
        "that name nothing (apply with `git apply`)",
    )
    parser.add_argument(
        "--patch-root",
        metavar="DIR",
        help="paths in the patch are relative to this folder (default: the git work tree "
        "of the specs, else their folder)",
    )


def run_audit(args: argparse.Namespace, settings: Settings) -> int:
    """Audit the suites; exit 0 when nothing to act on, 5 when there are findings (a check
    that answered "no": never 1, which means new test failures)."""
    check_specs(args.specs or [])
    observed, known, source = _observed(args.results, settings)
    since = _since_root(args.since_root)
    report = audit_suites(args.specs, observed, known, source, since)
    if args.patch:
        _write_patch(report, args, Path(args.patch))
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(report.render())
    return ExitCode.CHECK_FAILED if report.acts else ExitCode.OK


def audit_suites(
    specs: Sequence[str] | None,
    observed: dict[str, Observed],
    known: frozenset[str] = frozenset(),
    source: str = "",
    since_root: Path | None = None,
) -> Report:
    """The audit of the given (or bundled) specs against the installed torch; with
    `since_root` (an older upstream tree), the file suites' renames since then."""
    from suites import audit
    from suites.expand import expand, load_suites
    from suites.loader import SpecError

    try:
        loaded = load_suites(specs)
        expansion = expand(loaded, keep_trail=True)
    except SpecError as exc:
        raise CommandError(f"the suites do not lint:\n{exc}") from None
    facts = _facts()
    variants = expansion.variants
    rules = audit.audit_rules(loaded)
    by_source = {r.source: r for r in rules}
    used = {r.source for p in expansion.planned for r in p.matched} | {v.rule for v in variants}
    entries = audit.suite_entries(loaded)
    report = Report(source=source)
    report.findings += audit.xpasses(variants, observed, by_source)
    failures, uncomparable = audit.other_failures(variants, observed)
    report.findings += failures
    report.findings += audit.stale_rules(rules, used, expansion.unavailable, entries, facts)
    report.findings += audit.unmatched_names(rules, _file_test_names(loaded, expansion), _matches)
    report.findings += _uncovered(loaded, expansion)
    defaults = {
        spec.line_ref(("test_suite_config", "opinfo", i))
        for spec in loaded
        for i, _ in enumerate(spec.get(("test_suite_config", "opinfo")) or ())
    }
    report.findings += audit.unlisted_variants(variants, known, defaults)
    if uncomparable:
        report.notes.append(
            f"{uncomparable} xfail(s) failed, with reasons that are not failure summaries "
            "(written by hand or upstream's): not compared"
        )
    if source.startswith("History"):
        report.notes.append(
            "History keeps statuses, not messages: failures for another reason, and strict "
            "xfails that pass (reported as failed), need --results"
        )
    for suite, why in sorted(expansion.unavailable.items()):
        report.notes.append(f"suite {suite!r} not audited: {why}")
    if since_root is not None:
        _renames(report, loaded, specs, expansion, observed, since_root)
    return report


def _since_root(value: str | None) -> Path | None:
    if value is None:
        return None
    path = Path(value)
    if not path.is_dir():
        raise CommandError(f"--since-root {value}: no such folder (an older TORCH_ROOT)")
    return path.resolve()


def _renames(
    report: Report,
    loaded: Sequence[Any],
    specs: Sequence[str] | None,
    expansion: Any,
    observed: dict[str, Observed],
    since_root: Path,
) -> None:
    """Expand the file suites over the old tree too and put the renames into `report`: in
    the environment a test process sees, with TORCH_ROOT the old tree."""
    from suites import audit, spec_patch
    from suites.expand import expand, load_suites
    from suites.loader import SpecError
    from suites.renames import find_renames

    env = child_environment({"TORCH_ROOT": str(since_root)})
    try:
        before = expand(load_suites(specs, env), env=env)
    except SpecError as exc:
        raise CommandError(
            f"the suites do not expand over --since-root {since_root}:\n{exc}"
        ) from None
    if not before.records:
        report.notes.append(f"--since-root {since_root}: no file suite expands there; no renames")
        return
    for suite, why in sorted(before.unavailable.items()):
        report.notes.append(f"suite {suite!r} over --since-root: {why}")
    latest = {
        vid: Outcome(vid, seen.latest, message=seen.message) for vid, seen in observed.items()
    }
    renames = find_renames(list(before.records.values()), list(expansion.records.values()), latest)
    edits = spec_patch.rename_edits(loaded, renames.renamed)
    report.findings = audit.rename_findings(renames, edits, report.findings)
    report.renames = renames
    report.rename_edits = edits
    if renames.removed:
        report.notes.append(
            f"{len(renames.removed)} upstream variant(s) gone since {since_root} with no "
            "renamed match (removed): "
            + ", ".join(renames.removed[:5])
            + (" ..." if len(renames.removed) > 5 else "")
        )


def _facts() -> Facts:
    import torch

    from suites.databases import load_db

    names = {
        db: frozenset({s.name for s in load_db(db)} | {str(s.info.name) for s in load_db(db)})
        for db in DATABASES
    }
    dtypes = frozenset(n for n in dir(torch) if isinstance(getattr(torch, n, None), torch.dtype))
    return Facts(torch.__version__.split("+")[0], names, dtypes)


def _uncovered(loaded: Sequence[Any], expansion: Any) -> list[Any]:
    from suites import audit
    from suites.databases import load_db
    from suites.expand import _select
    from suites.templates import modules, ops

    covered = {(p.db, p.variant.subject) for p in expansion.planned if p.kind == "opinfo"}
    selected: set[tuple[str, str]] = set()
    for spec in loaded:
        for entry in spec.get(("test_suite_config", "opinfo")) or ():
            selected.update((entry["db"], s.name) for s in _select(load_db(entry["db"]), entry))
    used_dbs = {db for db, _ in selected} | {
        entry["db"] for spec in loaded for entry in spec.get(("test_suite_config", "opinfo")) or ()
    }
    subjects = {db: [s.name for s in load_db(db)] for db in DATABASES}
    return [
        *audit.uncovered_subjects(subjects, covered, selected, used_dbs),
        *audit.unreferenced_templates(
            [*ops.TEMPLATES, *modules.TEMPLATES], audit.referenced_templates(loaded)
        ),
    ]


def _file_test_names(loaded: Sequence[Any], expansion: Any) -> dict[str, set[str]]:
    """Rule source -> the generic test names of its upstream file (available file suites)."""
    from suites.expand import file_suite_unavailable
    from suites.upstream import UpstreamError, enumerate_tests

    out: dict[str, set[str]] = {}
    for spec in loaded:
        if spec.suite_name in expansion.unavailable:
            continue
        for fi, entry in enumerate(spec.get(("test_suite_config", "files")) or ()):
            where = ("test_suite_config", "files", fi)
            path, _why = file_suite_unavailable(spec, where)
            if path is None:
                continue
            try:
                bases = {t.base_name for t in enumerate_tests(path)}
            except UpstreamError:
                continue
            for ti, _ in enumerate(entry.get("tests") or ()):
                out[spec.line_ref((*where, "tests", ti))] = bases
    return out


def _matches(name: str, base: str) -> bool:
    from suites.rules import _entry_matches

    return any(_entry_matches({"names": [name]}, base))


def _observed(
    results: Sequence[str] | None, settings: Settings
) -> tuple[dict[str, Observed], frozenset[str], str]:
    """Per variant what runs saw; History's last inventory; where it came from."""
    if results:
        statuses: dict[str, list[Status]] = {}
        messages: dict[str, str] = {}
        for name in results:
            for outcome in _read_results(Path(name)):
                if outcome.status is Status.REMOVED:
                    continue
                statuses.setdefault(outcome.id, []).append(outcome.status)
                messages[outcome.id] = outcome.message
        observed = {vid: Observed(tuple(s), messages[vid]) for vid, s in statuses.items()}
        return observed, frozenset(), "results " + ", ".join(results)
    snapshot = history_store(settings).snapshot()
    observed = {
        vid: Observed(h.recent, "", h.flaky) for vid, h in snapshot.variants.items() if h.recent
    }
    where = "Redis" if settings.redis_url else str(settings.state_dir)
    return observed, snapshot.known_variants, f"History ({where}, {len(observed)} variant(s))"


def _read_results(path: Path) -> list[Outcome]:
    """Outcomes of a `--spyre-results` JSON-lines file or of a run's run.json."""
    from suites.results_file import parse_line

    if not path.exists():
        raise CommandError(f"{path}: no such results file (--results)")
    text = read_text(path, "results file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        try:
            return [Outcome.from_json(r) for r in data["results"]]
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise CommandError(f"{path}: a run.json whose results are malformed: {exc!r}") from None
    outcomes = [e for e in map(parse_line, text.splitlines()) if isinstance(e, Outcome)]
    if not outcomes:
        raise CommandError(
            f"{path}: no results in it (want a --spyre-results JSON-lines file or a run.json)"
        )
    return outcomes


def _write_patch(report: Report, args: argparse.Namespace, out: Path) -> None:
    from suites.audit import audit_rules
    from suites.expand import load_suites
    from suites.spec_patch import removal_patch, rename_patch

    by_source = {r.source: r for r in audit_rules(load_suites(args.specs))}
    remove: dict[Path, set[int]] = {}
    for finding in report.findings:
        rule = by_source.get(finding.where)
        if finding.patched and rule is not None and rule.kind == "expectations":
            remove.setdefault(rule.file, set()).add(rule.index)
    edits = report.rename_edits
    root = (
        Path(args.patch_root) if args.patch_root else work_tree([*remove, *{e.path for e in edits}])
    )
    text, refused = removal_patch(remove, root)
    renamed_text, not_renamed = rename_patch(edits, root)
    text += renamed_text
    refused += not_renamed
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"{out}: cannot write the patch: {exc.strerror}") from None
    report.notes.extend(refused)
    count = sum(len(v) for v in remove.values()) - len(refused)
    renamed = f", renames {len(edits) - len(not_renamed)} name(s)" if edits else ""
    report.notes.append(
        f"patch {out}: removes {count} expectation(s) in {len(remove)} file(s){renamed}, "
        f"paths relative to {root}; uncovered OpInfos are listed, never added"
        if text
        else f"patch {out}: empty, nothing to remove"
    )
