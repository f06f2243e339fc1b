"""Safe YAML loading that remembers where every key and value came from.

No torch here: the loader, lint and schema run in the control plane and on any machine.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from contracts.errors import BadInput

Path_ = tuple[str | int, ...]
Mark = tuple[int, int]  # 1-based line and column

# ${TORCH_ROOT} and ${TORCH_DEVICE_ROOT}, as torch-spyre expands them.
_TOKEN = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")


class SpecError(BadInput):
    """A spec cannot be loaded, validated or expanded; the message names file:line:col."""


@dataclass(frozen=True)
class SpecFile:
    """One YAML file: its data and the position of every value and key in it."""

    path: Path
    data: Any
    values: dict[Path_, Mark] = field(default_factory=dict)
    keys: dict[Path_, Mark] = field(default_factory=dict)
    duplicate_keys: tuple[tuple[Path_, Mark], ...] = ()

    def mark(self, where: Path_, *, key: bool = False) -> Mark:
        """Position of the value at `where` (or of its key), falling back to the nearest parent."""
        table = self.keys if key else self.values
        probe = tuple(where)
        while probe:
            if probe in table:
                return table[probe]
            if probe in self.values:
                return self.values[probe]
            probe = probe[:-1]
        return self.values.get((), (1, 1))

    def location(self, where: Path_, *, key: bool = False) -> str:
        """`file:line:col` of a value (or key)."""
        line, col = self.mark(where, key=key)
        return f"{self.path}:{line}:{col}"

    def line_ref(self, where: Path_) -> str:
        """`file:line`, the form a Variant's `rule` carries."""
        return f"{self.path}:{self.mark(where)[0]}"

    def get(self, where: Path_, default: Any = None) -> Any:
        node = self.data
        for part in where:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return default
        return node

    @property
    def suite_name(self) -> str:
        """The suite name: `test_suite_config.name`, else the file name without extension."""
        name = self.get(("test_suite_config", "name"))
        if isinstance(name, str) and name:
            return name
        stem = self.path.name
        for suffix in (".yaml", ".yml"):
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
        return stem


class _Problem(Exception):
    def __init__(self, message: str, mark: Mark) -> None:
        super().__init__(message)
        self.message = message
        self.mark_ = mark


_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}

# Bounds that keep a hostile file from hanging or exhausting a worker. Specs are small, flat
# documents: the bundled ones are 200 kB and nest 8 levels deep.
MAX_SPEC_BYTES = 20_000_000
MAX_DEPTH = 64
# YAML aliases may add at most this many values to a document (or as many as it has itself,
# when that is more): a 400-byte "billion laughs" file otherwise expands to 10^9 values.
MAX_ALIAS_VALUES = 100_000


def _mark(node: yaml.Node) -> Mark:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _alias_limit(unique: int) -> int:
    return max(MAX_ALIAS_VALUES, unique)


def _error(message: str, mark: Any) -> yaml.composer.ComposerError:
    return yaml.composer.ComposerError(None, None, message, mark)


class _BoundedComposer(yaml.composer.Composer):
    """PyYAML's composer, refusing recursive aliases, deep nesting and alias bombs.

    Composition never expands an alias (the alias shares the anchored node), so counting
    here is cheap; what is refused never reaches anything that walks the document as a tree.
    An error names the alias (or value) where the document goes past a bound.
    """

    # The event stream, from the yaml.parser.Parser the loader mixes this composer with.
    check_event: Callable[..., bool]
    get_event: Callable[[], Any]
    peek_event: Callable[[], Any]

    def __init__(self) -> None:
        super().__init__()
        self._open: set[str] = set()  # anchors whose value is being composed
        self._sizes: dict[str, tuple[int, int]] = {}  # anchor -> (values, levels) it expands to
        self._unique = 0  # values written out in the file
        self._expanded = 0  # values with every alias expanded
        self._depth = 0  # levels of the value being composed, aliases expanded
        self._deepest = 0  # deepest level reached in the value being composed
        self._past: list[tuple[int, str, Any]] = []  # aliases past MAX_ALIAS_VALUES added

    def compose_document(self) -> Any:
        node = super().compose_document()
        limit = _alias_limit(self._unique)
        for added, anchor, mark in self._past:
            if added > limit:
                raise _error(
                    f"alias *{anchor} takes the values that aliases add to this file "
                    f"past {limit} (a YAML alias bomb?); write the values out instead",
                    mark,
                )
        return node

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.get_event()
            anchor = event.anchor
            if anchor in self._open:
                raise _error(
                    f"alias *{anchor} is inside the value it refers to (a recursive "
                    "structure, which a spec cannot be)",
                    event.start_mark,
                )
            if anchor not in self.anchors:
                raise _error(f"found undefined alias *{anchor}", event.start_mark)
            size, levels = self._sizes[anchor]
            reach = self._depth + levels
            if reach > MAX_DEPTH:
                raise _error(
                    f"alias *{anchor} nests values deeper than {MAX_DEPTH} levels", event.start_mark
                )
            self._deepest = max(self._deepest, reach)
            self._expanded += size
            added = self._expanded - self._unique
            if added > MAX_ALIAS_VALUES:
                self._past.append((added, anchor, event.start_mark))
            return self.anchors[anchor]
        event = self.peek_event()
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _error(f"values nested deeper than {MAX_DEPTH} levels", event.start_mark)
        anchor = event.anchor
        before, outer = self._expanded, self._deepest
        self._deepest = self._depth
        self._unique += 1
        self._expanded += 1
        if anchor is not None:
            self._open.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open.discard(anchor)
        if anchor is not None:
            self._sizes[anchor] = (self._expanded - before, self._deepest - self._depth)
        self._deepest = max(outer, self._deepest)
        return node


class _SpecLoader(
    _BoundedComposer,
    yaml.reader.Reader,
    yaml.scanner.Scanner,
    yaml.parser.Parser,
    yaml.resolver.Resolver,
):
    def __init__(self, text: str) -> None:
        yaml.reader.Reader.__init__(self, text)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        _BoundedComposer.__init__(self)
        yaml.resolver.Resolver.__init__(self)


def _compose(text: str) -> yaml.Node | None:
    """The document's node graph.

    Without anchors there are no aliases to bound, and libyaml (when PyYAML has it) composes
    the document in a fraction of the time of the pure-Python scanner (20 s over 5 MB);
    `_build` bounds its depth. A document that may have an anchor (`&`) goes through the
    bounded composer.
    """
    if yaml.__with_libyaml__ and "&" not in text:
        loader: Any = yaml.cyaml.CSafeLoader(text)
    else:
        loader = _SpecLoader(text)
    try:
        node: yaml.Node | None = loader.get_single_node()
        return node
    finally:
        loader.dispose()


def parse_yaml(text: str, path: Path) -> SpecFile:
    """Parse YAML safely; raise SpecError (`file:line:col: message`) on broken YAML."""
    try:
        root = _compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        raise SpecError(f"{path}:{line}:{col}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}:1:1: invalid YAML: {exc}") from None
    if root is None:
        return SpecFile(path=path, data=None, values={(): (1, 1)})
    values: dict[Path_, Mark] = {}
    keys: dict[Path_, Mark] = {}
    dups: list[tuple[Path_, Mark]] = []
    constructor = yaml.SafeLoader("")
    try:
        data = _build(root, (), constructor, values, keys, dups)
    except _Problem as exc:
        raise SpecError(f"{path}:{exc.mark_[0]}:{exc.mark_[1]}: {exc.message}") from None
    finally:
        constructor.dispose()
    return SpecFile(path=path, data=data, values=values, keys=keys, duplicate_keys=tuple(dups))


def _build(
    node: yaml.Node,
    where: Path_,
    constructor: yaml.SafeLoader,
    values: dict[Path_, Mark],
    keys: dict[Path_, Mark],
    dups: list[tuple[Path_, Mark]],
) -> Any:
    values[where] = _mark(node)
    if len(where) >= MAX_DEPTH:
        raise _Problem(f"invalid YAML: values nested deeper than {MAX_DEPTH} levels", _mark(node))
    if isinstance(node, yaml.MappingNode | yaml.SequenceNode) and node.tag not in _PLAIN_TAGS:
        # Only plain mappings and lists: a tag could ask for arbitrary objects.
        raise _Problem(f"invalid YAML value: tag {node.tag!r} is not allowed", _mark(node))
    if isinstance(node, yaml.MappingNode):
        # Merge keys (`<<`) are rare in specs; flatten them the way the safe loader does.
        try:
            constructor.flatten_mapping(node)
        except yaml.constructor.ConstructorError as exc:
            mark = exc.problem_mark
            raise _Problem(
                f"invalid YAML merge (<<): {exc.problem}",
                (mark.line + 1, mark.column + 1) if mark else _mark(node),
            ) from None
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _Problem("mapping keys must be plain scalars", _mark(key_node))
            key = _scalar(key_node, constructor)
            if not isinstance(key, str):
                key = str(key)
            child = (*where, key)
            if key in out:
                dups.append((child, _mark(key_node)))
            keys[child] = _mark(key_node)
            out[key] = _build(value_node, child, constructor, values, keys, dups)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [
            _build(item, (*where, i), constructor, values, keys, dups)
            for i, item in enumerate(node.value)
        ]
    return _scalar(node, constructor)


def _scalar(node: yaml.Node, constructor: yaml.SafeLoader) -> Any:
    try:
        return constructor.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        raise _Problem(f"invalid YAML value: {exc.problem}", _mark(node)) from None
    except (ValueError, OverflowError) as exc:
        # e.g. an integer of more than 4,300 digits, or a date like 2024-02-30.
        raise _Problem(f"invalid YAML value {_preview(node)}: {exc}", _mark(node)) from None


def _preview(node: yaml.Node) -> str:
    text = str(node.value)
    return repr(text if len(text) <= 40 else text[:37] + "...")


def load_spec(path: str | Path) -> SpecFile:
    """Read and parse one spec file (no validation; see `suites.lint`)."""
    path = Path(path)
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise SpecError(f"{path}:1:1: is a folder, not a spec file")
        if not stat.S_ISREG(info.st_mode):  # a FIFO or a device would block or never end
            raise SpecError(f"{path}:1:1: not a regular file")
        with path.open("rb") as fh:
            raw = fh.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(f"{path}:1:1: no such file") from None
    except OSError as exc:
        raise SpecError(f"{path}:1:1: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(
            f"{path}:1:1: {info.st_size / 1e6:.1f} MB; a spec file may have at most "
            f"{MAX_SPEC_BYTES // 1_000_000} MB (split it into several suites)"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError(
            f"{path}:{line}:{col}: not UTF-8 text: byte "
            f"0x{raw[exc.start]:02x} ({exc.reason}); save the file as UTF-8"
        ) from None
    return parse_yaml(text, path)


def bundled_specs_dir() -> Path:
    """The folder of specs shipped in the package (`suites/specs`)."""
    return Path(str(resources.files("suites") / "specs"))


def spec_paths(paths: Iterable[str | Path] | None = None) -> list[Path]:
    """Spec files named by `paths` (files or folders, searched recursively); bundled by default.

    Generated expectations files (`*.expectations.yaml`) are loaded through the spec that
    references them, not as suites of their own.
    """
    roots = [Path(p) for p in paths] if paths else [bundled_specs_dir()]
    found: list[Path] = []
    for root in roots:
        if root.is_dir():
            found.extend(
                p
                for p in sorted(root.rglob("*.y*ml"))
                if p.suffix in (".yaml", ".yml") and not is_expectations_file(p)
            )
        else:
            found.append(root)
    return found


def is_expectations_file(path: Path) -> bool:
    return path.name.endswith((".expectations.yaml", ".expectations.yml"))


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) that defines the spec format."""
    text = (resources.files("suites") / "schema.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def expand_tokens(value: str, env: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """Expand `${NAME}` tokens from the environment; returns the text and the unset names."""
    environ = os.environ if env is None else env
    missing: list[str] = []

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ or not environ[name]:
            missing.append(name)
            return match.group(0)
        return environ[name]

    return _TOKEN.sub(sub, value), missing


def resolve_test_path(
    raw: str, spec_path: Path, env: dict[str, str] | None = None
) -> tuple[Path | None, list[str]]:
    """A file entry's path with tokens expanded; None and the unset token names if any.

    Paths built from a token are relative to the working directory (like the variable);
    plain relative paths are relative to the spec file.
    """
    resolved, missing = expand_tokens(raw, env)
    if missing:
        return None, missing
    path = Path(resolved)
    if not path.is_absolute() and resolved == raw:
        path = spec_path.parent / path
    return path.absolute(), []


# The upstream test files a change under test edits, in its mirror of TORCH_ROOT (absolute
# paths, `os.pathsep` between them): set by the runner on the changed side's test processes.
EDITED_TESTS_VAR = "SPYRE_CI_EDITED_TESTS"


def edited_tests(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The real paths `$SPYRE_CI_EDITED_TESTS` names (empty when unset)."""
    raw = (os.environ if environ is None else environ).get(EDITED_TESTS_VAR, "")
    return frozenset(os.path.realpath(p) for p in raw.split(os.pathsep) if p)


def suite_test_files(spec: SpecFile, env: dict[str, str] | None = None) -> list[Path]:
    """The test files a file suite imports, with `${NAME}` expanded as in `env` (default:
    this process's environment); an entry under an unset variable names none."""
    found = []
    entries = spec.get(("test_suite_config", "files"))
    for entry in entries if isinstance(entries, list) else ():
        raw = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(raw, str):
            continue
        path, _missing = resolve_test_path(raw, spec.path, env)
        if path is not None:
            found.append(path)
    return found


def reuses_any(spec: SpecFile, files: frozenset[str], env: dict[str, str] | None = None) -> bool:
    """Whether a file suite imports one of `files` (real paths) or a file beside one of
    them (upstream test files import their siblings)."""
    folders = {os.path.dirname(f) for f in files}
    for path in suite_test_files(spec, env):
        real = os.path.realpath(path)
        if real in files or os.path.dirname(real) in folders:
            return True
    return False


def as_names(value: Any) -> list[str]:
    """torch-spyre accepts a single string where a list of names is expected."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def item_names(items: Any) -> Iterator[tuple[int, str]]:
    """(index, name) of a list whose items are strings or mappings with a `name`."""
    for i, item in enumerate(items or ()):
        if isinstance(item, str):
            yield i, item
        elif isinstance(item, dict) and isinstance(item.get("name"), str):
            yield i, item["name"]
