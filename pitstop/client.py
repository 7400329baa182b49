"""Temporal client factory: the one place that knows how pitstop talks to Temporal.

Every client (CLI, worker, Slack bridge, schedules, demo, tests, replayer) goes through
`connect` or `data_converter`, so the data converter (pydantic, plus AES-GCM payload
encryption when keys are configured, then the claim-check of large payloads into the payload
store) and the tracing interceptor are the same on both sides of every call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.client import Client, Interceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes, PayloadCodec
from temporalio.service import TLSConfig

from pitstop.codec import AesGcmCodec
from pitstop.codec_claimcheck import DEFAULT_THRESHOLD, ClaimCheckCodec
from pitstop.codec_keys import CodecKeyError, Keyring, keyring_for
from pitstop.payload_store import BlobStore, PayloadStoreError, open_store
from pitstop.payload_store_cache import DEFAULT_CACHE_BYTES
from pitstop.settings import Settings

if TYPE_CHECKING:
    from temporalio.contrib.opentelemetry import TracingInterceptor

# How long to wait for the first RPC before calling the server unreachable. Connection
# refused fails at once; this bounds the case of a black-holed address.
CONNECT_TIMEOUT_SECONDS = 10.0


class PitstopConnectionError(ConnectionError):
    """Temporal could not be reached (wrong address, server down, TLS or auth mismatch)."""


def tracing_interceptor() -> TracingInterceptor:
    """The interceptor used by clients and workers alike.

    `always_create_workflow_spans` makes workflow spans even when the caller sent no trace
    context (a run started from the UI), so every run shows up in the trace backend.
    """
    # Imported here: it pulls in the whole worker package (~80 ms), which a CLI without
    # tracing never needs.
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return TracingInterceptor(always_create_workflow_spans=True)


def converter_for(
    keyring: Keyring | None,
    store: BlobStore | None = None,
    *,
    threshold: int = DEFAULT_THRESHOLD,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> DataConverter:
    """The pydantic data converter, encrypting with `keyring` when there is one, and moving
    payloads over `threshold` bytes into `store` when there is one (encrypted first).

    With encryption on, failure messages and stack traces move into an encrypted payload
    too (Temporal stores them in plain text otherwise), since module errors quote output.
    """
    encryption = AesGcmCodec(keyring) if keyring is not None else None
    codec: PayloadCodec | None = encryption
    if store is not None:
        codec = ClaimCheckCodec(store, encryption, threshold=threshold, cache_bytes=cache_bytes)
    if codec is None:
        return pydantic_data_converter
    if encryption is None:
        return dataclasses.replace(pydantic_data_converter, payload_codec=codec)
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def payload_store(settings: Settings) -> BlobStore:
    """The store every process of these settings claim-checks large payloads into."""
    return open_store(settings.payload_store, settings.home, settings.payload_s3_endpoint)


def data_converter(settings: Settings | None = None) -> DataConverter:
    """The converter of every pitstop client, worker, replayer and the codec server (default:
    from the environment). Raises CodecKeyError or PayloadStoreError on bad configuration."""
    settings = settings or Settings.from_env()
    keyring = keyring_for(settings)
    return converter_for(
        keyring,
        payload_store(settings),
        threshold=settings.payload_threshold,
        cache_bytes=settings.payload_cache_bytes,
    )


def _encryption_of(codec: PayloadCodec | None) -> AesGcmCodec | None:
    if isinstance(codec, ClaimCheckCodec):
        codec = codec.inner
    return codec if isinstance(codec, AesGcmCodec) else None


def encryption_summary(converter: DataConverter) -> str:
    """`on, active key id …` or `off`, for logs and status lines (never a key)."""
    encryption = _encryption_of(converter.payload_codec)
    return f"on, {encryption.keyring.describe()}" if encryption is not None else "off"


def payload_store_summary(converter: DataConverter) -> str:
    """Where large payloads go, for logs and status lines."""
    codec = converter.payload_codec
    return codec.describe() if isinstance(codec, ClaimCheckCodec) else "off (every payload goes to Temporal)"


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None


def tls_config(settings: Settings) -> TLSConfig | bool:
    """TLS for the connection: False for plaintext (the dev server), a TLSConfig otherwise."""
    if not settings.tls_enabled:
        return False
    has_files = any(
        p is not None
        for p in (
            settings.temporal_tls_client_cert_path,
            settings.temporal_tls_client_key_path,
            settings.temporal_tls_server_ca_cert_path,
        )
    )
    if not has_files and settings.temporal_tls_server_name is None:
        # System roots, no client certificate: Temporal Cloud with an API key.
        return True
    return TLSConfig(
        server_root_ca_cert=_read(settings.temporal_tls_server_ca_cert_path),
        client_cert=_read(settings.temporal_tls_client_cert_path),
        client_private_key=_read(settings.temporal_tls_client_key_path),
        domain=settings.temporal_tls_server_name,
    )


def unreachable_message(address: str, detail: str | None = None) -> str:
    message = f"cannot reach Temporal at {address} (is `pitstop dev up` running?)"
    hint = "or set TEMPORAL_ADDRESS to your Temporal's host:port"
    return f"{message}: {_reason(detail)}; {hint}" if detail else f"{message}; {hint}"


def _reason(detail: str) -> str:
    """The operating system's words from the Rust core's transport error (`Os { ..., message:
    "Connection refused" }`), else the error on one line, shortened."""
    said: list[str] = re.findall(r'message: "([^"]+)"', detail)
    if said:
        return said[-1]
    text = " ".join(detail.split())
    return text if len(text) <= 200 else text[:197] + "..."


async def connect(settings: Settings | None = None, *, tracing: bool = True) -> Client:
    """Connect to Temporal as `settings` (default: from the environment) describe.

    Raises PitstopConnectionError with a readable message when the server cannot be reached.
    """
    settings = settings or Settings.from_env()
    interceptors: list[Interceptor] = [tracing_interceptor()] if tracing else []
    api_key = settings.temporal_api_key.get_secret_value() if settings.temporal_api_key else None
    try:
        tls = tls_config(settings)
    except OSError as exc:
        raise PitstopConnectionError(f"cannot read a TLS file for Temporal: {exc}") from exc
    try:
        converter = data_converter(settings)
    except CodecKeyError as exc:
        raise PitstopConnectionError(f"payload encryption keys: {exc}") from None
    except PayloadStoreError as exc:
        raise PitstopConnectionError(f"payload store: {exc}") from None
    try:
        return await asyncio.wait_for(
            Client.connect(
                settings.temporal_address,
                namespace=settings.temporal_namespace,
                api_key=api_key,
                tls=tls,
                data_converter=converter,
                interceptors=interceptors,
            ),
            timeout=CONNECT_TIMEOUT_SECONDS,
        )
    except TimeoutError as exc:
        raise PitstopConnectionError(
            unreachable_message(settings.temporal_address, f"no answer in {CONNECT_TIMEOUT_SECONDS:g}s")
        ) from exc
    except (RuntimeError, OSError) as exc:
        # The Rust core reports connection failures as RuntimeError("Failed client connect: ...").
        raise PitstopConnectionError(unreachable_message(settings.temporal_address, str(exc))) from exc
