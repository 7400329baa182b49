"""Connection settings for clients and workers, read from the environment.

The variable names are the ones Temporal's own CLI and SDK environment configuration use
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS*`), so one shell
set up for `temporal` also drives `pitstop` and `python worker.py`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from pitstop.stack_ui import DEFAULT_UI_URL, stack_ui_url

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean (use true/false)")


class Settings(BaseModel):
    """Where Temporal is and how to reach it; where pitstop keeps its local state."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    # SecretStr so the key never shows up in a repr, a log line or an error message.
    temporal_api_key: SecretStr | None = None
    temporal_tls: bool = False
    temporal_tls_client_cert_path: Path | None = None
    temporal_tls_client_key_path: Path | None = None
    temporal_tls_server_ca_cert_path: Path | None = None
    temporal_tls_server_name: str | None = None
    task_queue: str = "pitstop"
    home: Path = Field(default=Path(".pitstop"))
    ui_url: str = DEFAULT_UI_URL
    # Payload encryption keys (see pitstop/codec_keys.py): the keyring itself, or a file
    # holding it; neither means `<home>/codec.keys` if present, else no encryption.
    codec_key: SecretStr | None = None
    codec_key_file: Path | None = None
    # Claim-check of large payloads (pitstop/codec_claimcheck.py, docs/payloads.md): where the
    # blobs go (`dir:/path` or `s3://bucket/prefix`; None: `<home>/payloads/`), the size over
    # which a payload goes there, and how many bytes of blobs a process keeps in memory.
    payload_store: str | None = None
    payload_s3_endpoint: str | None = None
    payload_threshold: int = Field(default=128 * 1024, ge=1024, le=256 * 1024)
    payload_cache_bytes: int = Field(default=64 * 1024 * 1024, ge=0)

    @property
    def tls_enabled(self) -> bool:
        """TLS is on when asked for, or implied by a certificate or an API key (as in Temporal's SDKs)."""
        return (
            self.temporal_tls
            or self.temporal_tls_client_cert_path is not None
            or self.temporal_tls_server_ca_cert_path is not None
            or self.temporal_api_key is not None
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """Build settings from environment variables; unset or empty variables keep the defaults."""

        def get(name: str) -> str | None:
            value = environ.get(name)
            return value if value else None

        values: dict[str, object] = {}
        plain = {
            "TEMPORAL_ADDRESS": "temporal_address",
            "TEMPORAL_NAMESPACE": "temporal_namespace",
            "TEMPORAL_API_KEY": "temporal_api_key",
            "TEMPORAL_TLS_CLIENT_CERT_PATH": "temporal_tls_client_cert_path",
            "TEMPORAL_TLS_CLIENT_KEY_PATH": "temporal_tls_client_key_path",
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": "temporal_tls_server_ca_cert_path",
            "TEMPORAL_TLS_SERVER_NAME": "temporal_tls_server_name",
            "PITSTOP_TASK_QUEUE": "task_queue",
            "PITSTOP_HOME": "home",
            "PITSTOP_CODEC_KEY": "codec_key",
            "PITSTOP_CODEC_KEY_FILE": "codec_key_file",
            "PITSTOP_PAYLOAD_STORE": "payload_store",
            "PITSTOP_PAYLOAD_S3_ENDPOINT": "payload_s3_endpoint",
            "PITSTOP_PAYLOAD_THRESHOLD": "payload_threshold",
            "PITSTOP_PAYLOAD_CACHE_BYTES": "payload_cache_bytes",
        }
        for env_name, field in plain.items():
            value = get(env_name)
            if value is not None:
                values[field] = value
        tls = environ.get("TEMPORAL_TLS")
        if tls is not None:
            values["temporal_tls"] = _parse_bool("TEMPORAL_TLS", tls)
        # Links go to the UI of the stack actually in use, not to the default port.
        values["ui_url"] = stack_ui_url(
            Path(str(values.get("home", cls.model_fields["home"].default))),
            str(values.get("temporal_address", cls.model_fields["temporal_address"].default)),
            environ,
        )
        return cls.model_validate(values)
