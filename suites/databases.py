"""torch's test databases (op_db, python_ref_db, module_db), named as variant ids name them.

Imports torch: runner side and inventory building only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

DTYPE_NONE = "none"  # dtype part of ids for templates that take no dtype (error_inputs)


@dataclass(frozen=True)
class Subject:
    """One entry of a test database under its variant-id name."""

    db: str
    name: str  # OpInfo name with its variant (`div.floor_rounding`), or module name
    info: Any  # the OpInfo / ModuleInfo


def opinfo_subject_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else str(op.name)


_DUNDER = re.compile(r"^__r?(?P<base>i?[a-z_]+?)__$")


def family_of(db: str, name: str, info: Any = None) -> str:
    """Base op name relating aliases, in-place/out/reverse variants, refs and decompositions."""
    if db == "module_db":
        return name
    base = str(getattr(info, "name", name)) if info is not None else name.split(".", 1)[0]
    for prefix in ("_refs.", "_prims."):
        if base.startswith(prefix):
            base = base[len(prefix) :]
    dunder = _DUNDER.match(base)
    if dunder:
        base = dunder.group("base")
        if base.startswith("i") and base[1:] in {"add", "sub", "mul", "and", "or", "xor"}:
            base = base[1:]
    if base.endswith("_") and not base.endswith("__"):
        base = base[:-1]
    return base


@cache
def load_db(db: str) -> tuple[Subject, ...]:
    """Every entry of a database, in its upstream order."""
    if db == "module_db":
        from torch.testing._internal.common_modules import module_db

        return tuple(Subject(db, m.name, m) for m in module_db)
    from torch.testing._internal.common_methods_invocations import op_db, python_ref_db

    source = op_db if db == "op_db" else python_ref_db
    return tuple(Subject(db, opinfo_subject_name(op), op) for op in source)


def known_names_data() -> dict[str, Any]:
    """The data of `suites/data/known_names.json` for the installed torch."""
    import torch

    return {
        "torch_version": torch.__version__.split("+")[0],
        # Both the bare OpInfo names and the names with variants select ops.
        "op_db": sorted(
            {s.info.name for s in load_db("op_db")} | {s.name for s in load_db("op_db")}
        ),
        "python_ref_db": sorted(
            {s.info.name for s in load_db("python_ref_db")}
            | {s.name for s in load_db("python_ref_db")}
        ),
        "module_db": sorted({s.name for s in load_db("module_db")}),
    }


def write_known_names(path: Path) -> None:
    path.write_text(json.dumps(known_names_data(), indent=0) + "\n", encoding="utf-8")
