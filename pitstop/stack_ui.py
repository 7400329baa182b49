"""Where the Temporal UI of the stack in use is, for every link pitstop prints or posts.

`PITSTOP_UI_URL` says it outright. Otherwise, when the Temporal this process talks to is the
embedded stack of its home (`pitstop dev up` records its config in `<home>/run/stack.json`), the
UI is that stack's: `pitstop dev up --ui-port 9233` (or `PITSTOP_UI_PORT=9233`) must not give
links to :8233. Then `PITSTOP_UI_PORT` next to the Temporal host, then Temporal's own default.

Light on purpose (no import of pitstop.devstack): the CLI reads it on every command.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

STATE_FILE = "stack.json"
DEFAULT_UI_URL = "http://127.0.0.1:8233"
_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}


def stack_state_path(home: Path) -> Path:
    """Where `pitstop dev up` records the config it started the stack with."""
    return home / "run" / STATE_FILE


def _host_port(address: str) -> tuple[str, str]:
    host, _, port = address.rpartition(":")
    host = "127.0.0.1" if host in _LOOPBACK else host
    return host, port


def _saved_stack(home: Path) -> dict[str, object] | None:
    try:
        state = json.loads(stack_state_path(home).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def stack_ui_url(home: Path, temporal_address: str, environ: Mapping[str, str] = os.environ) -> str:
    """The UI of the stack in use (see the module docstring for the order)."""
    explicit = environ.get("PITSTOP_UI_URL", "").strip()
    if explicit:
        return explicit
    temporal_host, temporal_port = _host_port(temporal_address)
    state = _saved_stack(home)
    if state is not None:
        host = str(state.get("host", "127.0.0.1"))
        # StackConfig's defaults for what a hand-written file leaves out.
        stack_address = f"{host}:{state.get('temporal_port', 7233)}"
        if _host_port(stack_address) == (temporal_host, temporal_port):
            return f"http://{host}:{state.get('ui_port', 8233)}"
    port = environ.get("PITSTOP_UI_PORT", "").strip()
    if port:
        return f"http://{temporal_host}:{port}"
    return DEFAULT_UI_URL
