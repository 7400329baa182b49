"""What the claim-check codec costs: `python bench/payload_codec_overhead.py [--rounds 2000]`.

1. Normal traffic: module results (0.3-20 KB of JSON) encoded and decoded by pitstop's data
   converter without the claim-check layer and with it, encryption off and on. The layer adds
   a length check per payload on encode and a metadata lookup on decode; printed as the ratio
   of the two (1.00: no measurable cost).
2. Large payloads: a 3 MB payload through encode (hash + atomic write of a directory store)
   and decode (read + hash), cold and from the in-memory cache, against a plain in-memory
   copy of the same bytes.

Ratios, not wall-clock targets: the machine running it decides the absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter

from pitstop.client import converter_for
from pitstop.codec_claimcheck import ClaimCheckCodec
from pitstop.codec_keys import parse_keyring
from pitstop.contracts import ModuleResult
from pitstop.payload_store import DirectoryStore

KEY = "kb:" + base64.b64encode(os.urandom(32)).decode()


def results() -> list[ModuleResult]:
    """Module results as activities return them: 0.3 to 20 KB of JSON."""
    return [ModuleResult(changed=True, rc=0, stdout="x" * n, data={"n": n}) for n in (200, 1_500, 20_000)]


async def round_trips(converter: DataConverter, values: Sequence[ModuleResult], rounds: int) -> float:
    hints: list[type] = [ModuleResult] * len(values)
    started = time.perf_counter()
    for _ in range(rounds):
        await converter.decode(await converter.encode(values), hints)
    return time.perf_counter() - started


async def codec_alone(codec: ClaimCheckCodec, payloads: Sequence[Payload], rounds: int) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        await codec.decode(await codec.encode(payloads))
    return time.perf_counter() - started


async def small(store: DirectoryStore, rounds: int) -> None:
    values = results()
    keyring = parse_keyring(KEY, "bench")
    for label, key in (("encryption off", None), ("encryption on", keyring)):
        without, with_it = converter_for(key), converter_for(key, store)
        await round_trips(with_it, values, 50)  # warm up
        # Interleaved, best of several: other load on the machine hits both sides alike.
        best = [float("inf"), float("inf")]
        for _ in range(7):
            for side, converter in enumerate((without, with_it)):
                best[side] = min(best[side], await round_trips(converter, values, rounds))
        print(
            f"module results through the data converter, {label}: with claim-check / without = "
            f"{best[1] / best[0]:.3f}"
        )
    payloads = await converter_for(None).encode(values)
    alone = await codec_alone(ClaimCheckCodec(store), payloads, rounds)
    whole = await round_trips(converter_for(None), values, rounds)
    print(
        f"  the claim-check layer alone, on payloads it lets through: {alone / whole:.3f} of the plain "
        "converter's own round trip"
    )
    print(f"  blobs written for them: {sum(1 for _ in store.blobs())} (expected 0)")


async def large(store: DirectoryStore) -> None:
    big = Payload(metadata={"encoding": b"json/plain"}, data=os.urandom(3 * 1024 * 1024))
    started = time.perf_counter()
    for _ in range(20):
        Payload.FromString(big.SerializeToString())
    copy = (time.perf_counter() - started) / 20
    writer = ClaimCheckCodec(store)
    started = time.perf_counter()
    [reference] = await writer.encode([big])
    encode = time.perf_counter() - started
    cold_reader = ClaimCheckCodec(store)
    started = time.perf_counter()
    await cold_reader.decode([reference])
    cold = time.perf_counter() - started
    started = time.perf_counter()
    await cold_reader.decode([reference])
    warm = time.perf_counter() - started
    print(
        "3 MB payload, as multiples of serializing+parsing it once in memory: "
        f"encode (hash, fsync'd write) {encode / copy:.1f}x, decode cold (read, hash) {cold / copy:.1f}x, "
        f"decode from cache {warm / copy:.2f}x"
    )
    print(f"  reference size in history: {reference.ByteSize()} bytes")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = DirectoryStore(Path(tmp) / "payloads")
        await small(store, args.rounds)
        await large(store)


if __name__ == "__main__":
    asyncio.run(main())
