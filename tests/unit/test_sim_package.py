"""The simulator is its own package (`pitstop_sim`, the `sim` extra): the runtime loads without
it, and the CLI's `pitstop sim serve` defaults are the simulator's own."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

from pitstop_sim.etcd_store import DEFAULT_PREFIX
from pitstop_sim.ssh.files import CLUSTER_NAME

# Setting a module to None in sys.modules makes every import of it (and of its submodules)
# raise ImportError, as on a worker installed without the simulator.
_WITHOUT_SIM = textwrap.dedent(
    """
    import sys
    sys.modules["pitstop_sim"] = None
    import worker
    import activities
    import workflows
    import pitstop.cli.app
    loaded = sorted(m for m in sys.modules if m.startswith("pitstop_sim") and sys.modules[m] is not None)
    assert not loaded, loaded
    print("started without pitstop_sim")
    """
)


def test_the_worker_and_the_cli_load_without_the_simulator() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_SIM], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "started without pitstop_sim" in done.stdout


def test_the_block_above_really_blocks_the_simulator() -> None:
    # Without this the test above could pass because nothing tried the import at all.
    code = 'import sys; sys.modules["pitstop_sim"] = None; import pitstop_sim.cluster'
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "pitstop_sim" in done.stderr


def _serve_defaults() -> dict[str, object]:
    from pitstop.cli.app import app

    sim = next(group.typer_instance for group in app.registered_groups if group.name == "sim")
    assert sim is not None
    serve = next(command.callback for command in sim.registered_commands if command.callback)
    assert serve is not None and serve.__name__ == "serve"
    return {name: param.default for name, param in inspect.signature(serve).parameters.items()}


def test_the_cli_defaults_are_the_simulators() -> None:
    # `pitstop sim serve` names them without importing the simulator; they must not drift.
    defaults = _serve_defaults()
    assert defaults["name"] == CLUSTER_NAME
    assert defaults["etcd_prefix"] == DEFAULT_PREFIX
