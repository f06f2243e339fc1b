"""The Inventory's kernel map: C++ function -> ops, read from the torch's native_functions.yaml."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from suites.inventory import (
    DEFAULT_KEY,
    META_KEY,
    NATIVE_FUNCTIONS,
    installed_kernels,
    kernel_table,
    native_functions_yaml,
)
from suites.model import Inventory
from tests.selector.cpp_sources import BUNDLED
from tests.selector.cpp_sources import installed_kernels as installed_table
from tests.testing.cli import build_inventory
from tests.testing.paths import GLU_SPEC

YAML = """\
- func: sqrt(Tensor self) -> Tensor
  structured_delegate: sqrt.out
  dispatch:
    SparseCPU, SparseCUDA: sqrt_sparse

- func: sqrt_(Tensor(a!) self) -> Tensor(a!)
  structured_delegate: sqrt.out

- func: sqrt.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
  structured: True
  structured_inherits: TensorIteratorBase
  dispatch:
    CPU, CUDA: sqrt_out

- func: cdist(Tensor x1, Tensor x2, float p=2, int? compute_mode=None) -> Tensor

- func: absolute.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)

- func: _cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor
  dispatch:
    CPU, CUDA: _cdist_forward
  autogen: _cdist_forward.out

- func: special_ndtri.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
  python_module: special
  dispatch:
    CPU, CUDA: special_ndtri_out

- func: gelu(Tensor self, *, str approximate='none') -> Tensor
  python_module: nn
  dispatch:
    CPU: gelu_cpu
    CompositeExplicitAutograd: gelu_default
"""


def test_every_kind_of_entry_names_its_kernels() -> None:
    table = kernel_table(YAML)
    assert table["sqrt_out"] == ("CPU, CUDA", ("sqrt",))  # the structured delegates fold in
    assert table["sqrt_sparse"] == ("SparseCPU, SparseCUDA", ("sqrt",))
    assert table["sqrt"] == (META_KEY, ("sqrt",))  # TORCH_META_FUNC(sqrt)
    assert table["cdist"] == (DEFAULT_KEY, ("cdist",))  # no dispatch: the default kernel
    assert table["absolute_out"] == (DEFAULT_KEY, ("absolute",))
    assert table["_cdist_forward"] == ("CPU, CUDA", ("_cdist_forward",))
    assert table["special_ndtri_out"] == ("CPU, CUDA", ("special_ndtri", "special.ndtri"))
    assert table["gelu_cpu"] == ("CPU", ("gelu", "nn.functional.gelu"))
    assert table["gelu_default"] == ("CompositeExplicitAutograd", ("gelu", "nn.functional.gelu"))
    assert "_cdist_forward_out" not in table  # autogen kernels are generated, not written


def test_the_installed_torch_yaml_maps_the_kernels_of_distance_and_unary_ops() -> None:
    table = installed_table()
    assert len(table) > 2000
    assert table["_cdist_forward"][1] == ("_cdist_forward",)
    assert table["_euclidean_dist"] == ("CompositeExplicitAutograd", ("_euclidean_dist",))
    assert table["cdist"] == (DEFAULT_KEY, ("cdist",))
    assert table["abs_out"][1] == ("abs",)
    assert table["special_ndtri_out"][1] == ("special_ndtri", "special.ndtri")
    assert table["sigmoid_out"][1] == ("sigmoid",)


def _layout(root: Path, rel: str) -> Path:
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("", encoding="utf-8")
    yaml = root / rel
    yaml.parent.mkdir(parents=True)
    yaml.write_text(YAML, encoding="utf-8")
    return root / "torch" / "__init__.py"


@pytest.mark.parametrize("rel", NATIVE_FUNCTIONS)
def test_the_yaml_is_found_next_to_the_torch_it_belongs_to(tmp_path: Path, rel: str) -> None:
    torch_file = _layout(tmp_path, rel)  # a wheel's torchgen, or a source checkout's aten/
    assert native_functions_yaml(str(torch_file)) == (tmp_path / rel).resolve()
    assert installed_kernels(str(torch_file)) == kernel_table(YAML)


def test_a_torch_without_the_yaml_has_an_empty_map(tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("", encoding="utf-8")
    assert installed_kernels(str(tmp_path / "torch" / "__init__.py")) == {}


def test_the_map_round_trips_and_an_old_inventory_still_loads(tmp_path: Path) -> None:
    with gzip.open(BUNDLED, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    assert "kernels" not in data  # written before the Inventory carried a map
    old = Inventory.from_json(data)
    assert old.kernels == {}
    table = kernel_table(YAML)
    new = Inventory(old.torch_version, old.torch_git_version, old.variants[:3], kernels=table)
    new.save(tmp_path / "inventory.json.gz")
    assert Inventory.load(tmp_path / "inventory.json.gz").kernels == table


@pytest.mark.slow
def test_spyre_ci_inventory_carries_the_map_of_its_torch(tmp_path: Path) -> None:
    path = build_inventory(GLU_SPEC, tmp_path / "glu.json.gz")
    inventory = Inventory.load(path)
    assert inventory.kernels == installed_table()
    assert inventory.kernels["glu_out"][1] == ("glu", "nn.functional.glu")


def test_an_unreadable_yaml_leaves_the_map_empty_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch_file = _layout(tmp_path, NATIVE_FUNCTIONS[0])
    (tmp_path / NATIVE_FUNCTIONS[0]).write_text("- func: [unclosed\n", encoding="utf-8")
    assert installed_kernels(str(torch_file)) == {}
    assert "native_functions.yaml: no kernel map from it" in capsys.readouterr().err
