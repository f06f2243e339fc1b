"""What outlives a run: History (`history`), Redis clients (`redis_clients`), where specs
and changes are read from (`sources`), and the Inventory cache (`inventory_cache`). The bottom
layer: imports nothing else of workflows but `settings`."""
