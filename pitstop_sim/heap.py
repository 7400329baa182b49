"""The Python heap of a fleet-sized cluster: seeding 100,000 pods allocates millions of dicts,
and the cyclic garbage collector, which walks every tracked object on each full collection,
would spend about as long walking them as seeding takes, again on every later full collection.

Stored objects are acyclic JSON data freed by reference counting, so the collector finds
nothing in them: `bulk_load` pauses it while the store is filled and then freezes what is
there (`gc.freeze`: moved to a generation that is never walked), so later collections walk
only what was allocated since. Below `FREEZE_MIN_OBJECTS` stored objects (tests, demos) the
heap is left alone: freezing also keeps whatever cyclic garbage exists at that moment.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

FREEZE_MIN_OBJECTS = 20_000


@contextmanager
def bulk_load(stored_objects: Callable[[], int]) -> Iterator[None]:
    """Pause the cyclic GC for the block; freeze the heap after it if `stored_objects()` (how
    many objects the store holds, or its resourceVersion: writes so far) is big."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
    if stored_objects() >= FREEZE_MIN_OBJECTS:
        gc.collect()  # what seeding left as garbage goes now, not into the frozen generation
        gc.freeze()
