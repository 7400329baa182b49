"""Pure Kubernetes logic behind the `kube.*` modules: no client, no I/O.

The activities in `activities/kube/` read objects from the API as plain dicts (camelCase,
as the apiserver serves them) and hand them to these functions: which pods a drain
evicts, skips or refuses (`drain`), whether a node can leave (`capacity`), the checkpoint
protocol (`checkpoint`), taint lists (`taints`), deterministic Job names (`names`) and the
diff shown in check mode (`diff`). The labels and annotations pitstop reads and writes are
named in `annotations`.
"""
