"""The catalogue of shipped modules: importing it registers each exactly once."""

from pitstop import core_modules
from pitstop.module_args import kube, ssh

__all__ = ["core_modules", "kube", "ssh"]
