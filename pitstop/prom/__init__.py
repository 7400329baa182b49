"""Prometheus and Alertmanager, read as their HTTP APIs answer (`prom.query`, `prom.alerts`).

`response` parses Prometheus's query envelope (docs/querying/api.md, web/api/v1/api.go),
`thresholds` judges a result against a runbook's `expect`, `alerts` reads Prometheus's
`/api/v1/alerts` and Alertmanager's `/api/v2/alerts` and filters them by labels, `http` sends the
one GET each module makes (no redirects, no environment proxies, bounded bodies).
"""
