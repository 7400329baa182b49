"""pitstop: durable, Ansible-style runbooks for GPU Kubernetes platforms on Temporal."""

__version__ = "0.1.0"
