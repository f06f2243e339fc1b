"""Patches to spec and expectations files, in `git apply` form, made textually: comments and
formatting stay (pure but for reading the files' text).

- `removal_patch`: expectations entries removed by index (`suites audit --patch`: the xpass
  findings' exact ids and entries that match nothing);
- `expectations_patch`: entries removed and added (the upgrade run's `upgrade.patch`);
- `rename_edits` / `rename_patch`: names that follow an upstream rename (`suites.renames`), a
  comment citing the evidence above each edited line.

What cannot be edited textually (a flow-style list) is returned, never guessed at.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suites.loader import SpecFile, as_names, load_spec


def _blank_or_comment(line: str) -> bool:
    text = line.strip()
    return not text or text.startswith("#")


@dataclass(frozen=True)
class NewEntry:
    """An expectations entry to add (block style, like `suites record` writes them)."""

    id: str
    mode: str
    reason: str
    comment: str = ""  # a `#` line written just above the entry
    torch: str = ""  # the torch versions it holds on (PEP 440 specifiers); "" for every torch


def removal_patch(remove: Mapping[Path, set[int]], root: Path) -> tuple[str, list[str]]:
    """A unified diff (paths relative to `root`, `git apply` form) removing expectations
    entries by index; and the entries it could not remove textually (flow style)."""
    return expectations_patch(remove, {}, root)


def expectations_patch(
    remove: Mapping[Path, set[int]], add: Mapping[Path, Sequence[NewEntry]], root: Path
) -> tuple[str, list[str]]:
    """`removal_patch` that also adds entries: in id order when the list is sorted by id,
    else after its last entry; and what it could not edit textually (flow style)."""
    chunks: list[str] = []
    refused: list[str] = []
    for path in sorted(set(remove) | set(add)):
        text = path.read_text(encoding="utf-8")
        spec = load_spec(path)
        items = spec.get(("expectations",)) or []
        old = text.splitlines(keepends=True)
        lines = list(old)  # _insertions may open an empty `expectations: []`
        starts = [spec.mark(("expectations", i))[0] for i in range(len(items))]
        dash = [_dash_indent(lines[s - 1]) for s in starts]
        drop: set[int] = set()
        for i in sorted(remove.get(path, ())):
            if dash[i] is None or starts.count(starts[i]) > 1:
                refused.append(f"{path}:{starts[i]}: not a block-style list item; edit by hand")
                continue
            first = starts[i] - 1
            last = _item_end(lines, starts, i, dash[i] or 0)
            drop.update(range(first, last + 1))
        inserts = _insertions(path, spec, lines, items, starts, dash, add.get(path, ()), refused)
        new = [line for n, line in enumerate(lines) if n not in drop]
        last_kept = lines and len(lines) - 1 not in drop
        if last_kept and not lines[-1].endswith("\n") and inserts.get(len(lines)):
            new[-1] += "\n"
        for at in sorted(inserts, reverse=True):  # original line numbers, after the drops
            cut = sum(1 for n in range(at) if n not in drop)
            new[cut:cut] = inserts[at]
        emptied = items and len(remove.get(path, ())) == len(items) and not inserts
        if emptied and not refused:
            key_line = spec.mark(("expectations",), key=True)[0] - 1
            new[key_line] = re.sub(
                r"^(\s*expectations:)(\s*#.*)?$", r"\1 []\2", new[key_line].rstrip("\n")
            ) + ("\n" if new[key_line].endswith("\n") else "")
        if new == old:
            continue
        rel = _relative(path, root)
        diff = difflib.unified_diff(old, new, f"a/{rel}", f"b/{rel}")
        for line in diff:
            chunks.append(
                line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
            )
    return "".join(chunks), refused


def _insertions(
    path: Path,
    spec: SpecFile,
    lines: list[str],
    items: Sequence[Any],
    starts: list[int],
    dash: list[int | None],
    entries: Sequence[NewEntry],
    refused: list[str],
) -> dict[int, list[str]]:
    """0-based line -> the lines to insert before it (len(lines): at the end)."""
    import yaml

    if not entries:
        return {}
    if items and (None in dash or len(set(starts)) < len(starts)):
        refused.extend(f"{path}: not a block-style list; add {e.id} by hand" for e in entries)
        return {}
    if not items:  # `expectations: []` (or an empty key): a block list after the key line
        key_line = spec.mark(("expectations",), key=True)[0] - 1
        if not re.match(r"^\s*expectations:\s*(\[\s*\])?\s*(#.*)?$", lines[key_line]):
            refused.extend(
                f"{path}: no block-style expectations list; add {e.id} by hand" for e in entries
            )
            return {}
        lines[key_line] = re.sub(r":\s*\[\s*\]", ":", lines[key_line])
        if not lines[key_line].endswith("\n"):
            lines[key_line] += "\n"
        ids: list[str] = []
        indent = 0
    else:
        ids = [str(item.get("id", "")) if isinstance(item, dict) else "" for item in items]
        indent = dash[0] or 0
    ordered = ids == sorted(ids)
    out: dict[int, list[str]] = {}
    for entry in sorted(entries, key=lambda e: e.id):
        fields = {"id": entry.id, "mode": entry.mode, "reason": entry.reason}
        if entry.torch:
            fields["torch"] = entry.torch
        body = yaml.safe_dump(
            [fields],
            sort_keys=False,
            allow_unicode=True,
            width=100,
        )
        text = ([f"# {entry.comment}\n"] if entry.comment else []) + body.splitlines(True)
        text = [" " * indent + line for line in text]
        after = next((i for i, vid in enumerate(ids) if vid > entry.id), None) if ordered else None
        if not items:
            at = spec.mark(("expectations",), key=True)[0]
        elif after is None:
            at = _item_end(lines, starts, len(items) - 1, indent) + 1
        elif after == 0:
            at = spec.mark(("expectations",), key=True)[0]
        else:
            at = _item_end(lines, starts, after - 1, indent) + 1
        out.setdefault(at, []).extend(text)
    return out


def _dash_indent(line: str) -> int | None:
    stripped = line.lstrip(" ")
    return len(line) - len(stripped) if stripped.startswith("- ") else None


def _item_end(lines: list[str], starts: list[int], i: int, dash: int) -> int:
    """0-based index of the last line of item i (trailing comments stay with the next item)."""
    if i + 1 < len(starts):
        end = starts[i + 1] - 2
    else:
        end = len(lines) - 1
        for n in range(starts[i], len(lines)):
            line = lines[n]
            if _blank_or_comment(line):
                continue
            indent = len(line) - len(line.lstrip(" "))
            if indent <= dash:
                end = n - 1
                break
    while end > starts[i] - 1 and _blank_or_comment(lines[end]):
        end -= 1
    return end


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix().lstrip("/")


@dataclass(frozen=True)
class NameEdit:
    """One name in a spec or expectations file to replace, with a comment above its line."""

    path: Path
    line: int  # 1-based
    old: str
    new: str
    comment: str


def rename_edits(specs: Sequence[SpecFile], renames: Sequence[Any]) -> list[NameEdit]:
    """Where the loaded specs and their expectations files name what `renames`
    (`suites.renames.Rename`) renamed: file-suite test names (`Class::test` or `test`),
    `supported_ops` and `edits.ops` names of a renamed OpInfo, exact expectation ids."""
    out: list[NameEdit] = []
    by_suite: dict[str, list[Any]] = {}
    for r in renames:
        by_suite.setdefault(r.suite, []).append(r)
    seen_files: set[Path] = set()
    for spec in specs:
        mine = by_suite.get(spec.suite_name, [])
        if not mine:
            continue
        root = spec.get(("test_suite_config",)) or {}
        for fi, entry in enumerate(root.get("files") or ()):
            where = ("test_suite_config", "files", fi)
            stem = Path(str(entry.get("path", ""))).stem
            tests = [r for r in mine if r.template == stem and r.kind != "opinfo"]
            ops = [r for r in mine if r.template == stem and r.kind == "opinfo"]
            for ti, test in enumerate(entry.get("tests") or ()):
                names = test.get("names")
                for ni, name in enumerate(as_names(names)):
                    at = (*where, "tests", ti, "names") + (() if isinstance(names, str) else (ni,))
                    for r in tests:
                        new = _renamed_name(name, r.old_test, r.new_test)
                        if new is not None:
                            out.append(_edit(spec, at, name, new, r.line()))
                for kind in ("include", "exclude"):
                    items = ((test.get("edits") or {}).get("ops") or {}).get(kind)
                    at = (*where, "tests", ti, "edits", "ops", kind)
                    out += _op_edits(spec, at, items, ops)
            at = ("test_suite_config", "global", "supported_ops")
            out += _op_edits(spec, at, (root.get("global") or {}).get("supported_ops"), ops)
        carried = {a: (b, r) for r in mine for a, b in r.variants}
        for entry in root.get("opinfo") or ():
            name = entry.get("expectations_file")
            path = spec.path.parent / name if name else None
            if path is None or path in seen_files or not path.exists():
                continue
            seen_files.add(path)
            exp = load_spec(path)
            for i, item in enumerate(exp.get(("expectations",)) or ()):
                vid = str(item.get("id", "")) if isinstance(item, dict) else ""
                if vid in carried:
                    new_id, r = carried[vid]
                    out.append(_edit(exp, ("expectations", i, "id"), vid, new_id, r.line()))
    return sorted(set(out), key=lambda e: (str(e.path), e.line, e.old))


def _renamed_name(name: str, old: str, new: str) -> str | None:
    if name == old:
        return new
    if "::" not in name and name == old.split("::")[-1] != new.split("::")[-1]:
        return new.split("::")[-1]
    return None


def _op_edits(
    spec: SpecFile, where: tuple[Any, ...], items: Any, ops: Sequence[Any]
) -> list[NameEdit]:
    from suites.loader import item_names

    out = []
    for index, name in item_names(items):
        for r in ops:
            if name == r.old_test:
                at = (*where, index, "name") if isinstance(items[index], dict) else (*where, index)
                out.append(_edit(spec, at, name, r.new_test, r.line()))
    return out


def _edit(spec: SpecFile, where: tuple[Any, ...], old: str, new: str, why: str) -> NameEdit:
    return NameEdit(spec.path, spec.mark(where)[0], old, new, f"upstream {why}")


def rename_patch(edits: Sequence[NameEdit], root: Path) -> tuple[str, list[str]]:
    """A unified diff (paths relative to `root`) making `edits`, a comment above each edited
    line; and the edits it could not make (the name not on its line)."""
    chunks: list[str] = []
    refused: list[str] = []
    by_path: dict[Path, list[NameEdit]] = {}
    for e in edits:
        by_path.setdefault(e.path, []).append(e)
    for path in sorted(by_path):
        old = path.read_text(encoding="utf-8").splitlines(keepends=True)
        new = list(old)
        comments: dict[int, list[str]] = {}
        for e in by_path[path]:
            n = e.line - 1
            pattern = re.compile(r"(?<![\w.:])" + re.escape(e.old) + r"(?![\w.])")
            if n >= len(new) or not pattern.search(new[n]):
                refused.append(f"{path}:{e.line}: {e.old!r} is not on this line; rename it by hand")
                continue
            new[n] = pattern.sub(e.new.replace("\\", "\\\\"), new[n], count=1)
            text = new[n].lstrip(" ")
            if text.startswith("- ") or re.match(r"^[\w-]+:", text):
                indent = " " * (len(new[n]) - len(text))
                comments.setdefault(n, []).append(f"{indent}# {e.comment}\n")
        for n in sorted(comments, reverse=True):
            new[n:n] = comments[n]
        if new == old:
            continue
        rel = _relative(path, root)
        for line in difflib.unified_diff(old, new, f"a/{rel}", f"b/{rel}"):
            chunks.append(
                line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
            )
    return "".join(chunks), refused
