"""The front door: webhook and CRCR callback service, event normalization, GitHub adapter.

- `events`        normalization of deliveries into a contracts.event.TriggerEvent (pure); RelayError
- `signature`     X-Hub-Signature-256
- `intake`        the durable intake queue (Queue protocol, RedisIntake, Claimed)
- `config`        YAML + SPYRE_CI_* configuration
- `app`, `server` the Flask app and its gunicorn runner (`spyre-ci serve`)
- `front`, `http1` the gunicorn worker: requests read under deadlines, HTTP/1.1 by h11
- `metrics`       Prometheus counters kept in Redis
- `github`        GitHubAdapter over github3.py; `changes` fills changed files via compare
- `allowlist`, `fanout`, `callback`, `callback_auth`, `crcr_state`, `demotion`   CRCR relay mode

Never imports torch.
"""
