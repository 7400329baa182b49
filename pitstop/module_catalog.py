"""The catalogue of shipped modules: importing it registers each exactly once."""

from pitstop import core_modules
from pitstop.module_args import baseline, kube, ssh

__all__ = ["baseline", "core_modules", "kube", "ssh"]
