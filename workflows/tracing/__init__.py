"""Impact maps (traces): recording them with the runner (`impact_recorder`), their files
(`traces`) and where runs keep them (`trace_store`). Imports `runner` and `stores`."""
