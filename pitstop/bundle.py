"""Collect a runbook, the task files it imports and its inventory into one request bundle.

The CLI sends the files themselves (not paths) so that the worker plans exactly what the
operator has on disk, wherever the worker runs. Paths in the bundle are relative to the
deepest directory containing every file, so `import_tasks: tasks/x.yaml` still resolves.
"""

from __future__ import annotations

import os
from pathlib import Path

from pitstop.runbook import Inventory, Runbook, load_inventory, load_runbook
from pitstop.safe_yaml import read_text_capped

MAX_BUNDLE_BYTES = 1024 * 1024


class BundleError(ValueError):
    """The files cannot be sent as one run request."""


def collect(runbook_path: Path, inventory_path: Path | None) -> tuple[dict[str, str], str, str | None]:
    """Validate locally, then return (files, runbook name in bundle, inventory name in bundle).

    Raises RunbookError (with file:line:col) for invalid input, before anything is sent.
    """
    inventory: Inventory | None = load_inventory(inventory_path) if inventory_path else None
    imported: set[Path] = set()
    runbook: Runbook = load_runbook(runbook_path, inventory, imported=imported)
    sources = {runbook_path.resolve()}
    for task in runbook.all_tasks():
        sources.add(Path(task.source.path).resolve())
    # Every task file the loader read through an `import_tasks` (only those: a path written
    # anywhere else in a runbook is never read or sent), also one that only imports others.
    sources |= imported
    if inventory_path is not None:
        sources.add(inventory_path.resolve())
    base = Path(os.path.commonpath([str(p.parent) for p in sources]))
    # Sizes first: nothing is read once the files add up to more than the limit.
    size = sum(p.stat().st_size for p in sources)
    if size > MAX_BUNDLE_BYTES:
        raise BundleError(
            f"runbook bundle is {size} bytes; the limit is {MAX_BUNDLE_BYTES} (MAX_BUNDLE_BYTES): "
            "put large data on the worker (PITSTOP_RUNBOOK_DIR) instead of sending it"
        )
    files = {str(p.relative_to(base)): read_text_capped(p) for p in sorted(sources)}
    size = sum(len(t.encode()) for t in files.values())
    if size > MAX_BUNDLE_BYTES:  # the files grew while being read
        raise BundleError(f"runbook bundle is {size} bytes; the limit is {MAX_BUNDLE_BYTES}")
    inv_name = str(inventory_path.resolve().relative_to(base)) if inventory_path else None
    return files, str(runbook_path.resolve().relative_to(base)), inv_name
