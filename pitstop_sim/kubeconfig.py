"""The kubeconfig that points kubectl and the Python client at a rehearsal cluster."""

from __future__ import annotations

import io
import os
from pathlib import Path

from ruamel.yaml import YAML

DEFAULT_TOKEN = "pitstop-sim-token"
DEFAULT_CONTEXT = "pitstop-sim"


def kubeconfig(
    server: str,
    token: str = DEFAULT_TOKEN,
    name: str = DEFAULT_CONTEXT,
    namespace: str = "default",
    user: str | None = None,
) -> dict[str, object]:
    user = user or f"{name}-admin"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user, "namespace": namespace}}],
        "current-context": name,
    }


def write_kubeconfig(
    path: str | Path,
    server: str,
    token: str = DEFAULT_TOKEN,
    name: str = DEFAULT_CONTEXT,
    *,
    user: str | None = None,
) -> Path:
    """Write (replace) a kubeconfig file readable only by its owner, as kubectl expects."""
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    buffer = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.dump(kubeconfig(server, token, name, user=user), buffer)
    tmp.write_text(buffer.getvalue(), encoding="utf-8")
    os.chmod(tmp, 0o600)
    tmp.replace(target)
    return target
