# Test files that the workers' shards run (tests/e2e/test_worker_takeover.py), never collected
# on their own.
collect_ignore = ["slow_steps"]
