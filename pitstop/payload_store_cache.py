"""A bounded in-memory cache of blobs recently read from (or written to) the payload store.

Many workflows read the same blob (children started with one large input, a workflow replayed
after a worker restart, every status query against one run), so a worker keeps recent blobs
rather than fetching them again. Bounded by total bytes, least recently used out first; only
blobs whose SHA-256 was checked go in, so a hit needs no second check.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024


class BlobCache:
    """LRU by bytes; thread-safe (the codec reads the store on worker threads)."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._blobs)

    def get(self, digest: str) -> bytes | None:
        with self._lock:
            data = self._blobs.get(digest)
            if data is not None:
                self._blobs.move_to_end(digest)
            return data

    def put(self, digest: str, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return  # would evict everything else and still not fit
        with self._lock:
            old = self._blobs.pop(digest, None)
            if old is not None:
                self._size -= len(old)
            self._blobs[digest] = data
            self._size += len(data)
            while self._size > self.max_bytes:
                _, evicted = self._blobs.popitem(last=False)
                self._size -= len(evicted)
