"""pitstop's own metrics on the worker's `/metrics`, next to the Temporal SDK's.

- `registry`: the metric families and the registry they live in (never the process-global one).
- `activities`: an activity interceptor that updates them from what activities really did
  (module failures, drain durations, nodes cordoned by pitstop as the cluster says after each
  cordon/uncordon). Workflow code never touches a metric: it must replay deterministically.
- `runs`: a sweeper that counts runs by status and open gates from Temporal itself (visibility
  counts and each open run's `status` Query), so the figures are the same whichever worker
  serves them and survive a worker restart.
- `server`: one HTTP address serving pitstop's metrics followed by the Temporal SDK's (Core's
  Prometheus exporter runs on a loopback port of its own; see `server.py` for why).
"""
