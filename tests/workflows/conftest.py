from __future__ import annotations

from pathlib import Path

import pytest

from tests.testing.cli import build_inventory
from tests.testing.paths import GLU_SPEC
from tests.testing.shared import built_once


@pytest.fixture(scope="session")
def glu_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Inventory of tests/workflows/data/glu.yaml (2 variants) for the installed torch."""
    return built_once(tmp_path_factory, "glu.json.gz", lambda p: build_inventory(GLU_SPEC, p))
