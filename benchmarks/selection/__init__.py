"""The selection benchmark: mutations of PyTorch replayed to measure the selector by execution.

    python -m benchmarks.selection --only k-softmax-lastdim --out out/bench-selection

`engine` (the replay: plan, ground truth, judge), `results` (the record and its figures),
`mutations/` (the mutation sets, the in-process overlay, the impact restriction),
`make_mutations.py`, `mutations.yaml` and `specs/` (the shipped set and inventory). Kept
outside the product: nothing in it imports this package (`tests/test_boundaries.py`); its
test processes load the overlay through `SPYRE_CI_OVERLAY_MODULE` (`mutations.subprocess_env`).
"""
