"""The impact map's derived indexes: an overlay of newer traces gives what a map built whole
from the same traces gives."""

from __future__ import annotations

import random

from selector import ImpactMap
from selector.opnames import op_key


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


def test_the_index_built_on_demand_answers_as_a_whole_inversion() -> None:
    rng = random.Random(11)
    traces = _random_map(rng, [f"v{i}" for i in range(400)])
    impact = ImpactMap(
        functions={v: t[0] for v, t in traces.items()},
        aten_ops={v: t[1] for v, t in traces.items()},
    )
    by_function: dict[str, set[str]] = {}
    by_op: dict[str, set[str]] = {}
    for vid, (names, ops) in traces.items():
        for name in names:
            by_function.setdefault(name, set()).add(vid)
        for op in ops:
            by_op.setdefault(op_key(op), set()).add(vid)
    functions, ops = impact.inverted()
    # Asked one key at a time, in another order than a whole pass would take them.
    for name in sorted(by_function, reverse=True):
        assert name in functions
        assert functions[name] == by_function[name]
    assert {k: set(v) for k, v in ops.items()} == by_op
    assert len(functions) == len(by_function) and "torch/m9.py:f0" not in functions
    assert ops.get(op_key("aten::div")) is None
    for path in ("torch/m0.py", "torch/m3.py", "torch/none.py"):
        expected = {
            vid for name, ids in by_function.items() if name.startswith(path) for vid in ids
        }
        assert impact.executing_file(path) == expected
    assert impact.executing("torch/m2.py:f7") == by_function.get("torch/m2.py:f7", set())


def test_a_prepared_map_and_its_overlays_answer_as_an_unprepared_one() -> None:
    rng = random.Random(13)
    ids = [f"v{i}" for i in range(200)]
    traces = _random_map(rng, ids)

    def build() -> ImpactMap:
        return ImpactMap(
            functions={v: t[0] for v, t in traces.items()},
            aten_ops={v: t[1] for v, t in traces.items()},
        )

    prepared, plain = build(), build()
    prepared.prepare()
    assert prepared.inverted()[0]._names is not None and prepared.inverted()[1]._names is not None
    newer = {v: (t[0], t[1], "fp2") for v, t in _random_map(rng, ids[:30]).items()}
    for a, b in ((prepared, plain), (prepared.overlaid(newer), plain.overlaid(newer))):
        assert a.inverted() == b.inverted()
        assert a.executing("torch/m2.py:f7") == b.executing("torch/m2.py:f7")
        assert a.executing_file("torch/m3.py") == b.executing_file("torch/m3.py")
