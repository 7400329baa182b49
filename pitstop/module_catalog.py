"""The catalogue of shipped modules: importing it registers each exactly once."""

from pitstop import core_modules
from pitstop.module_args import baseline, etcd, gpu, kube, notify, observe, records, ssh, storage

__all__ = [
    "baseline",
    "core_modules",
    "etcd",
    "gpu",
    "kube",
    "notify",
    "observe",
    "records",
    "ssh",
    "storage",
]
