"""Running tests: one shard in pytest processes (`shard_runner`), the warm zygote
(`zygote`, `zygote_process`), the pool and its policies (`scheduling`, `stealing`), the
applied change (`change_overlay`), prepared torch builds (`torch_builds`) and the tracer
plugin loaded into test processes (`impact_tracer`). Imports only `stores` and `settings`."""
