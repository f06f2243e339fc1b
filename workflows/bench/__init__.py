"""Benchmark engines (the mutation replay of `spyre-ci bench selection`), apart from the product.

Nothing in the product imports this package: only `workflows/cli/commands/bench.py` (lazily, when
the command runs), the scripts in `benchmarks/` and their tests. `tests/workflows/test_layout.py`
checks it.
"""
