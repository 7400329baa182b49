"""Temporal client factory: the one place that knows how pitstop talks to Temporal.

Every client (CLI, worker, Slack bridge, schedules, demo, tests, replayer) goes through
`connect` or `data_converter`, so the data converter (pydantic, plus AES-GCM payload
encryption when keys are configured) and the tracing interceptor are the same on both sides
of every call.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from temporalio.client import Client, Interceptor
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.service import TLSConfig

from pitstop.codec import AesGcmCodec
from pitstop.codec_keys import CodecKeyError, Keyring, keyring_for
from pitstop.settings import Settings

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
    return TracingInterceptor(always_create_workflow_spans=True)


def converter_for(keyring: Keyring | None) -> DataConverter:
    """The pydantic data converter, encrypting with `keyring` when there is one.

    With encryption on, failure messages and stack traces move into an encrypted payload
    too (Temporal stores them in plain text otherwise), since module errors quote output.
    """
    if keyring is None:
        return pydantic_data_converter
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=AesGcmCodec(keyring),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def data_converter(settings: Settings | None = None) -> DataConverter:
    """The converter of every pitstop client, worker and replayer (default: from the environment)."""
    return converter_for(keyring_for(settings or Settings.from_env()))


def encryption_summary(converter: DataConverter) -> str:
    """`on, active key id …` or `off`, for logs and status lines (never a key)."""
    codec = converter.payload_codec
    return f"on, {codec.keyring.describe()}" if isinstance(codec, AesGcmCodec) else "off"


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
    return f"{message}: {detail}" if detail else message


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
