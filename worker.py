"""`python worker.py`: one pitstop worker process serving one task queue.

The entry point the design card names, kept as a thin wrapper: the worker is built and run by
the library (`pitstop.worker_app`: policy, keys, codec, interceptors, registered workflows and
activities, graceful shutdown), which `pitstop worker` runs too. `python worker.py --help` lists
the options; `--show-policy` prints the effective worker policy and exits.
"""

from __future__ import annotations

import typer

from pitstop.worker_app import main

__all__ = ["main"]

if __name__ == "__main__":
    typer.run(main)
