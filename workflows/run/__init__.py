"""The steps of one run: plan (`planning`), execute through one shard executor (`pipeline`),
verify, export and learn (`verification`, `exporting`, `forensics`), with its record
(`run_model`), what it tests (`under_test`) and the base torch's outcomes (`base_outcomes`).
Imports `tracing`, `runner` and `stores`; never a driver or the command line."""
