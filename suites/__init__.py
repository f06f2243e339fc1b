"""YAML test-reuse specs: schema, loader, expansion, Inventory, and the pytest plugin.

Only the runner-side modules import torch; the model, schema and loader do not.
"""
