"""The mutation-set format (YAML) and what a test subprocess needs to apply one.

```yaml
version: 1
mutations:
  - id: softmax-lastdim-scale          # unique
    kind: kernel                       # python | kernel
    file: aten/src/ATen/native/cpu/SoftMaxKernel.cpp   # the file the diff edits
    location: softmax_lastdim_kernel_impl              # function, method or op
    operator: arith                    # the mutation operator (free word: arith, constant,
                                       # negate, boundary, swap, delete, refactor, ...)
    ops: [aten::_softmax]              # kernel only: overload packets to override
    perturb: {scale: 1.01}             # kernel only: scale | offset | identity
    diff: |                            # what the selector sees (PyTorch repository layout)
      --- a/aten/src/ATen/native/cpu/SoftMaxKernel.cpp
      ...
```

For `python` mutations the diff itself is applied to the installed torch sources (in
memory), so the selector sees exactly the edit the tests run with.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import yaml

from selector.diff import FilePatch, parse_unified_diff
from selector.errors import SelectorError
from selector.patches import PatchError, apply_patch
from workflows.runner.change_overlay.prepare import (
    SITE_DIR,  # its sitecustomize activates mutations
)

ENV_VAR = "SPYRE_CI_MUTATION"  # path of the activation JSON a test subprocess reads
# The product's sitecustomize calls `activate()` of the module this names (it imports no
# benchmark code itself); the folder holding `benchmarks/` goes on PYTHONPATH for it.
OVERLAY_VAR = "SPYRE_CI_OVERLAY_MODULE"
OVERLAY_MODULE = "benchmarks.selection.mutations.overlay"
CHECKOUT = Path(__file__).resolve().parents[3]
KINDS = ("python", "kernel")
FORMAT_VERSION = 1


class MutationError(Exception):
    """A mutation set or a mutation cannot be used; the message names the file and entry."""


@dataclass(frozen=True)
class Perturbation:
    """How an emulated kernel edit changes the CPU result: `result * scale + offset`."""

    scale: float = 1.0
    offset: float = 0.0

    @property
    def identity(self) -> bool:
        return self.scale == 1.0 and self.offset == 0.0

    def to_json(self) -> dict[str, float]:
        return {"scale": self.scale, "offset": self.offset}


@dataclass(frozen=True)
class Mutation:
    """One upstream-style edit to PyTorch."""

    id: str
    kind: str
    file: str
    location: str
    operator: str
    diff: str
    ops: tuple[str, ...] = ()
    perturb: Perturbation = field(default_factory=Perturbation)
    note: str = ""
    source: str = ""  # "file: mutations[i]" for messages

    @property
    def patches(self) -> tuple[FilePatch, ...]:
        try:
            return parse_unified_diff(self.diff, self.source).files
        except SelectorError as exc:
            raise MutationError(f"{self.source}: diff: {exc}") from None

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(p.path for p in self.patches)

    @property
    def digest(self) -> str:
        """Identifies what runs and what the selector sees (a recorded ground truth is only
        valid for the same digest)."""
        import hashlib

        key = json.dumps([self.kind, self.diff, list(self.ops), self.perturb.to_json()])
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "file": self.file,
            "location": self.location,
            "operator": self.operator,
            "files": list(self.files),
            "digest": self.digest,
        }
        if self.kind == "kernel":
            data["ops"] = list(self.ops)
            data["perturb"] = self.perturb.to_json()
        if self.note:
            data["note"] = self.note
        return data


def torch_root() -> Path:
    """The directory holding the installed `torch` package (its repository-layout root)."""
    spec = find_spec("torch")
    if spec is None or spec.origin is None:
        raise MutationError("torch is not installed in this environment")
    return Path(spec.origin).resolve().parent.parent


def load_mutations(path: str | Path) -> list[Mutation]:
    """Read and check a mutation set; every problem is reported with its entry."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MutationError(f"{path}: cannot read the mutation set: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise MutationError(f"{path}: not YAML: {exc}") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("mutations"), list):
        raise MutationError(f"{path}: expected a mapping with a 'mutations' list")
    if data.get("version", FORMAT_VERSION) != FORMAT_VERSION:
        raise MutationError(f"{path}: version {data.get('version')!r} is not {FORMAT_VERSION}")
    problems: list[str] = []
    mutations: list[Mutation] = []
    seen: set[str] = set()
    for index, entry in enumerate(data["mutations"]):
        where = f"{path}: mutations[{index}]"
        try:
            mutation = _mutation(entry, where)
        except MutationError as exc:
            problems.append(str(exc))
            continue
        if mutation.id in seen:
            problems.append(f"{where}: duplicate id {mutation.id!r}")
        seen.add(mutation.id)
        mutations.append(mutation)
    if problems:
        raise MutationError("\n".join(problems))
    return mutations


_REQUIRED = ("id", "kind", "file", "location", "operator", "diff")
_ALLOWED = {*_REQUIRED, "ops", "perturb", "note"}


def _mutation(entry: Any, where: str) -> Mutation:
    if not isinstance(entry, Mapping):
        raise MutationError(f"{where}: expected a mapping")
    if "id" in entry:
        where = f"{where} (id {entry['id']!r})"
    unknown = sorted(set(entry) - _ALLOWED)
    if unknown:
        raise MutationError(
            f"{where}: unknown field(s) {', '.join(unknown)} "
            f"(allowed: {', '.join(sorted(_ALLOWED))})"
        )
    missing = [k for k in _REQUIRED if not isinstance(entry.get(k), str) or not entry[k]]
    if missing:
        raise MutationError(f"{where}: field(s) {', '.join(missing)} missing or not text")
    kind = entry["kind"]
    if kind not in KINDS:
        raise MutationError(f"{where}: field 'kind': {kind!r} is not one of {', '.join(KINDS)}")
    ops: tuple[str, ...] = ()
    perturb = Perturbation()
    if kind == "kernel":
        raw_ops = entry.get("ops")
        if (
            not isinstance(raw_ops, list)
            or not raw_ops
            or not all(isinstance(o, str) and o.startswith("aten::") for o in raw_ops)
        ):
            raise MutationError(
                f"{where}: field 'ops': a kernel mutation needs a list of "
                "aten op names like aten::_softmax"
            )
        ops = tuple(raw_ops)
        perturb = _perturbation(entry.get("perturb"), where)
    elif "ops" in entry or "perturb" in entry:
        raise MutationError(
            f"{where}: 'ops' and 'perturb' belong to kernel mutations; a "
            "python mutation is its diff"
        )
    mutation = Mutation(
        id=entry["id"],
        kind=kind,
        file=entry["file"],
        location=entry["location"],
        operator=entry["operator"],
        diff=entry["diff"],
        ops=ops,
        perturb=perturb,
        note=str(entry.get("note", "")),
        source=where,
    )
    files = mutation.files
    if mutation.file not in files:
        raise MutationError(
            f"{where}: field 'file': {mutation.file} is not edited by the "
            f"diff (it edits {', '.join(files) or 'nothing'})"
        )
    if kind == "python":
        bad = [f for f in files if not (f.startswith("torch/") and f.endswith(".py"))]
        if bad:
            raise MutationError(
                f"{where}: a python mutation edits torch/**.py files only, not {', '.join(bad)}"
            )
    return mutation


def _perturbation(raw: Any, where: str) -> Perturbation:
    if not isinstance(raw, Mapping) or not raw:
        raise MutationError(
            f"{where}: field 'perturb': expected {{scale: X}}, {{offset: X}} or {{identity: true}}"
        )
    unknown = sorted(set(raw) - {"scale", "offset", "identity"})
    if unknown:
        raise MutationError(f"{where}: field 'perturb': unknown key(s) {', '.join(unknown)}")
    if raw.get("identity"):
        if len(raw) > 1:
            raise MutationError(f"{where}: field 'perturb': identity takes no scale or offset")
        return Perturbation()
    try:
        return Perturbation(float(raw.get("scale", 1.0)), float(raw.get("offset", 0.0)))
    except (TypeError, ValueError):
        raise MutationError(f"{where}: field 'perturb': scale and offset must be numbers") from None


def module_name(repo_path: str) -> str:
    """`torch/nn/functional.py` -> `torch.nn.functional`; `.../__init__.py` -> the package."""
    parts = repo_path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def mutated_source(mutation: Mutation, patch: FilePatch, root: Path | None = None) -> str:
    """The installed file of `patch` with the mutation's hunks applied."""
    original = (root or torch_root()) / patch.path
    try:
        text = original.read_text(encoding="utf-8")
    except OSError as exc:
        raise MutationError(
            f"{mutation.source}: {patch.path}: not in the installed torch "
            f"({original}): {exc.strerror}"
        ) from None
    try:
        return apply_patch(text, patch)
    except PatchError as exc:
        raise MutationError(f"{mutation.source}: {exc}") from None


def subprocess_env(
    mutation: Mutation, workdir: Path, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment additions that make a Python subprocess run with `mutation` applied.

    Writes the activation file (and the mutated sources) under `workdir`.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    activation: dict[str, Any] = {"id": mutation.id, "kind": mutation.kind}
    if mutation.kind == "python":
        root = torch_root()
        modules = []
        for number, patch in enumerate(mutation.patches):
            text = mutated_source(mutation, patch, root)
            target = workdir / f"mutated.{number}.py"
            target.write_text(text, encoding="utf-8")
            modules.append(
                {
                    "module": module_name(patch.path),
                    "origin": str(root / patch.path),
                    "source": str(target),
                }
            )
        activation["modules"] = modules
    else:
        activation["ops"] = list(mutation.ops)
        activation["perturb"] = mutation.perturb.to_json()
    path = workdir / "mutation.json"
    path.write_text(json.dumps(activation, indent=1) + "\n", encoding="utf-8")
    environ = os.environ if base is None else base
    inherited = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    pythonpath = [str(SITE_DIR), str(CHECKOUT), *inherited]
    return {
        ENV_VAR: str(path),
        OVERLAY_VAR: OVERLAY_MODULE,
        "PYTHONPATH": os.pathsep.join(pythonpath),
    }


def check_all(mutations: Sequence[Mutation]) -> None:
    """Every python mutation applies to the installed torch (raises the first that does not)."""
    root = torch_root()
    for mutation in mutations:
        if mutation.kind == "python":
            for patch in mutation.patches:
                mutated_source(mutation, patch, root)
