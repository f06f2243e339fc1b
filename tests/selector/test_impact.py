"""The impact map's derived indexes: an overlay of newer traces gives what a map built whole
from the same traces gives."""

from __future__ import annotations

import random

from selector import ImpactMap


def _random_map(rng: random.Random, ids: list[str]) -> dict[str, tuple[frozenset[str], ...]]:
    functions = [f"torch/m{i % 5}.py:f{i}" for i in range(40)]
    ops = ["aten::add", "aten::add_", "aten::add.out", "aten::mul", "aten::sum", "aten::exp"]
    return {
        vid: (
            frozenset(rng.sample(functions, rng.randint(0, 6))),
            frozenset(rng.sample(ops, rng.randint(0, 3))),
        )
        for vid in ids
    }


def test_an_overlay_indexes_like_a_map_built_whole() -> None:
    rng = random.Random(7)
    ids = [f"v{i}" for i in range(300)]
    base_traces = _random_map(rng, ids)
    base = ImpactMap(
        functions={v: t[0] for v, t in base_traces.items()},
        aten_ops={v: t[1] for v, t in base_traces.items()},
        torch_version="2.13.0",
        fingerprints=dict.fromkeys(ids, "fp"),
    )
    before = {k: set(v) for k, v in base.inverted()[0].items()}
    # Replace some variants' traces (with fewer or other names), add new variants.
    newer = _random_map(rng, [*rng.sample(ids, 60), "new1", "new2"])
    newer["v0"] = (frozenset(), frozenset())  # a variant that now runs nothing traced
    joined = base.overlaid({v: (f, o, "fp2") for v, (f, o) in newer.items()})
    whole = ImpactMap(
        functions={**base.functions, **{v: t[0] for v, t in newer.items()}},
        aten_ops={**base.aten_ops, **{v: t[1] for v, t in newer.items()}},
        torch_version="2.13.0",
    )
    assert joined.inverted() == whole.inverted()
    assert joined.fingerprints == {v: "fp2" if v in newer else "fp" for v in [*ids, *newer]}
    assert joined.executing_file("torch/m1.py") == whole.executing_file("torch/m1.py")
    # The shipped map's own index is untouched by the overlay.
    assert {k: set(v) for k, v in base.inverted()[0].items()} == before
