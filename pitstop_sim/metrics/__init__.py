"""The exporters a GPU cluster's Prometheus scrapes, imitated for the rehearsal cluster:
dcgm-exporter (per GPU of each node), kube-state-metrics (nodes and pods) and etcd (per
control-plane member). Endpoints and admin calls: `pitstop_sim.metrics.routes`."""
