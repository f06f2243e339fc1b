"""`upgrade.patch`: the upgrade run's proposal to the expectations files, for `git apply`.

From the `run` rows of `upgrade.json`: each regressed variant, and each new variant failing
on the new version, gets an exact-id entry in its suite's expectations file (xfail for a
failure or an error, skip for a hang or a crash, as `suites record` writes them; the reason
is the failure's summary line, a comment above names the upgrade run); each fixed variant
whose expectation is an exact-id xfail entry loses that entry, and so does each variant the
new version no longer has (both kept for the torches before it: `torch: <TO`). Edits are textual
(`suites.spec_patch.expectations_patch`): comments and formatting stay. What it cannot edit
(file suites, flow-style lists, globs and spec rules) is returned as notes: edit by hand.
What upstream renamed (upgrade.json `renamed`) is renamed in the specs and expectations files
(`suites.spec_patch.rename_edits`), with a comment citing the evidence.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from suites.audit import AuditRule, audit_rules
from suites.model import Expectation, Status, split_variant_id
from suites.record import summarize
from suites.renames import Rename
from suites.rules import MODES
from suites.spec_patch import NewEntry, expectations_patch, rename_edits, rename_patch
from suites.torch_condition import torch_holds

_XFAILS = (Expectation.XFAIL, Expectation.XFAIL_STRICT)
_TO_ADD = ("regressed", "new-failing")


def suite_files(specs: Sequence[Any]) -> dict[str, list[tuple[set[str], Path]]]:
    """suite -> (templates, expectations file) of each opinfo entry that names one."""
    out: dict[str, list[tuple[set[str], Path]]] = {}
    for spec in specs:
        for entry in spec.get(("test_suite_config", "opinfo")) or ():
            name = entry.get("expectations_file")
            if name:
                path = (spec.path.parent / name).resolve()
                out.setdefault(spec.suite_name, []).append((set(entry["templates"]), path))
    return out


def upgrade_patch(
    data: Mapping[str, Any], specs: Sequence[Any], root: Path | None = None, run_id: str = ""
) -> tuple[str, Path, list[str]]:
    """The unified diff for upgrade.json `data` over the loaded `specs`; the folder its
    paths are relative to (default: the git work tree of the files, as the audit's); notes."""
    _loaded.cache_clear()  # files read once per patch, never from an earlier one
    from workflows.stores.sources import work_tree

    run = data.get("run") or {}
    files = suite_files(specs)
    versions = f"torch {data.get('from_version')} -> {data.get('to_version')}"
    # Valid on both sides: what changes at the new version holds from it on (`>=TO`), and
    # what it fixed keeps its entry for the torches before it (`<TO`), so one set of spec
    # files is green on the old torch and the new one alike.
    to = _release(str(data.get("to_version") or ""))
    since, until = (f">={to}", f"<{to}") if to else ("", "")
    exact: dict[str, AuditRule] = {}  # variant id -> its exact-id rule on the new torch
    for each in audit_rules(specs):
        holds = not to or torch_holds(each.torch, each.source, to)
        if each.kind == "expectations" and each.id_glob and holds:
            exact.setdefault(each.id_glob, each)
    where = f"upgrade run {run_id}, {versions}" if run_id else f"upgrade run {versions}"
    remove: dict[Path, set[int]] = {}
    add: dict[Path, list[NewEntry]] = {}
    notes: list[str] = []
    # What the new torch no longer has: an exact entry of it would match nothing there (the
    # audit's orphan), so it is kept for the torches before the new one only.
    gone = dict.fromkeys(
        [str(v) for v in data.get("removed") or ()]
        + [str(r["id"]) for r in run.get("rows") or () if r.get("category") == "removed"]
    )
    for vid in gone:
        rule = exact.get(vid)
        if rule is not None and until:
            remove.setdefault(rule.file.resolve(), set()).add(rule.index)
            _kept_before(rule, until, where, add, notes)
    for row in run.get("rows") or ():
        vid, category = str(row["id"]), str(row["category"])
        rule = exact.get(vid)
        if category == "fixed":
            if rule is not None and rule.mode in _XFAILS:
                remove.setdefault(rule.file.resolve(), set()).add(rule.index)
                if until:
                    _kept_before(rule, until, where, add, notes)
            else:
                notes.append(f"{vid}: fixed, not an exact-id xfail entry: edit by hand if needed")
            continue
        if category not in _TO_ADD:
            continue
        after = Status(row["after"]) if row.get("after") else Status.FAILED
        if after is Status.XFAILED:
            continue  # already expected to fail
        mode = "skip" if after in (Status.TIMEOUT, Status.CRASHED) else "xfail"
        summary = summarize(str(row.get("message") or ""))
        reason = f"{after}: {summary}" if mode == "skip" else summary
        try:
            suite, template, _subject, _dtype = split_variant_id(vid)
        except ValueError:
            notes.append(f"{vid}: not a variant id; nothing added")
            continue
        candidates = files.get(suite, [])
        paths = {p for templates, p in candidates if template in templates} or {
            p for _t, p in candidates
        }
        if len(paths) != 1:
            why = "no expectations file" if not paths else "several expectations files"
            notes.append(f"{vid}: {category}; suite {suite!r} has {why}: add it by hand")
            continue
        (path,) = paths
        if rule is not None and rule.mode is MODES[mode]:
            continue  # its exact entry says so already
        if rule is not None:  # an exact entry decides it otherwise: from TO on, the new one
            remove.setdefault(rule.file.resolve(), set()).add(rule.index)
            if until:
                _kept_before(rule, until, where, add, notes)
        comment = f"{where}: {category} ({row.get('before') or 'new'} -> {after})"
        add.setdefault(path, []).append(NewEntry(vid, mode, reason, comment, since))
    # What upstream renamed: entries (file-suite names, supported_ops, exact expectation ids)
    # follow to the new name. An exact entry the rows above edit is left to them.
    renames = [Rename.from_json(r) for r in data.get("renamed") or ()]
    edits = [
        e
        for e in rename_edits(specs, renames)
        if not any(
            rule.file.resolve() == e.path.resolve() and e.old == rule.id_glob
            for rule in exact.values()
            if rule.index in remove.get(rule.file.resolve(), set())
        )
    ]
    touched = sorted(set(remove) | set(add) | {e.path.resolve() for e in edits})
    base = root if root is not None else work_tree(touched)
    renamed_in = {e.path.resolve() for e in edits}
    both = renamed_in & (set(remove) | set(add))
    for path in sorted(both):
        notes.append(f"{path}: both renamed and edited; its renames are left out: do them by hand")
    text, refused = expectations_patch(remove, add, base)
    renamed_text, not_renamed = rename_patch(
        [e for e in edits if e.path.resolve() not in both], base
    )
    return text + renamed_text, base, notes + refused + not_renamed


def _release(version: str) -> str:
    """`2.14.1` of `2.14.1+cpu` (a local label is no version of its own); "" when unknown."""
    return version.split("+", 1)[0].strip()


def _kept_before(
    rule: AuditRule,
    until: str,
    where: str,
    add: dict[Path, list[NewEntry]],
    notes: list[str],
) -> None:
    """The exact entry `rule` (being removed) written again for the torches before the new
    version (`until`): the old torch keeps its expectation. A note instead when the entry
    holds more than id, mode and reason (a torch condition already, a precision)."""
    item = (_loaded(rule.file).get(("expectations",)) or [])[rule.index]
    if not isinstance(item, dict) or set(item) - {"id", "mode", "reason"}:
        notes.append(f"{rule.source}: keep it for the torches before this one ({until}) by hand")
        return
    add.setdefault(rule.file.resolve(), []).append(
        NewEntry(
            str(item["id"]), str(item["mode"]), str(item["reason"]), f"{where}: kept before", until
        )
    )


@functools.lru_cache(maxsize=32)
def _loaded(path: Path) -> Any:
    """An expectations file as loaded, once per patch run for all of its entries."""
    from suites.loader import load_spec

    return load_spec(path)


def write_upgrade_patch(
    data: Mapping[str, Any], spec_paths: Sequence[str], out: Path, run_id: str = ""
) -> str:
    """Write `out` (upgrade.patch) for an upgrade.json (with a `run`, or with renames to
    carry); one line saying so."""
    from suites.expand import load_suites

    text, base, notes = upgrade_patch(data, load_suites(spec_paths or None), None, run_id)
    out.write_text(text, encoding="utf-8")
    lines = text.splitlines()
    renamed = sum(1 for line in lines if line.startswith("+") and "# upstream renamed: " in line)
    # An exact entry renamed shows as one id removed and one added: count it as renamed.
    renamed_ids = sum(
        1
        for before, line in zip(lines, lines[1:], strict=False)
        if "# upstream renamed: " in before and re.match(r"^\+\s*- id: ", line)
    )
    counts = {
        sign: sum(1 for line in lines if re.match(rf"^\{sign}\s*- id: ", line)) - renamed_ids
        for sign in "+-"
    }
    kept = sum(1 for line in lines if re.match(r"^\+\s*torch: ['\"]?<", line))
    if not text:
        return f"patch: {out} is empty (nothing to propose){_notes(notes)}"
    return (
        f"patch: {out} (git apply, paths relative to {base}): adds {counts['+']} and "
        f"removes {counts['-']} expectation(s)"
        + (f", keeps {kept} for the torches before the new one" if kept else "")
        + (f", renames {renamed} name(s) upstream renamed" if renamed else "")
        + _notes(notes)
    )


def _notes(notes: Sequence[str]) -> str:
    return "".join(f"\n  note: {n}" for n in notes[:20]) + (
        f"\n  ... and {len(notes) - 20} more" if len(notes) > 20 else ""
    )
