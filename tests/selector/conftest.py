from __future__ import annotations

import pytest

from selector import InventoryIndex
from suites.model import Inventory
from tests.selector.synthetic import small_inventory


@pytest.fixture(scope="session")
def inventory() -> Inventory:
    return small_inventory()


@pytest.fixture(scope="session")
def index(inventory: Inventory) -> InventoryIndex:
    return InventoryIndex.build(inventory)
