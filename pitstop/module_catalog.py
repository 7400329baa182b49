"""The catalogue of shipped modules: importing it registers each exactly once."""

from pitstop import core_modules
from pitstop.module_args import (
    acceptance,
    baseline,
    compat,
    etcd,
    gpu,
    inventory,
    kube,
    kube_upgrade,
    notify,
    observe,
    records,
    runs,
    ssh,
    storage,
)

__all__ = [
    "acceptance",
    "baseline",
    "compat",
    "core_modules",
    "etcd",
    "gpu",
    "inventory",
    "kube",
    "kube_upgrade",
    "notify",
    "observe",
    "records",
    "runs",
    "ssh",
    "storage",
]
