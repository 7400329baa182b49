"""`pitstop codec serve | keygen | show`: payload encryption from the command line."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Annotated
from urllib.parse import urlsplit

import typer

codec_app = typer.Typer(
    name="codec",
    help="Payload encryption: keys, and the codec server the Temporal UI decodes with.",
    no_args_is_help=True,
    add_completion=False,
)

DEFAULT_PORT = 8081


def _fail(message: str) -> None:
    typer.echo(f"pitstop codec: {message}", err=True)
    raise typer.Exit(2)


def default_ui_origins(ui_url: str) -> list[str]:
    """The origin of $PITSTOP_UI_URL (the UI people open), with its loopback twin."""
    from pitstop.codec_server import loopback_twins, normalize_origin

    parts = urlsplit(ui_url)
    return loopback_twins(normalize_origin(f"{parts.scheme}://{parts.netloc}"))


@codec_app.command()
def serve(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = DEFAULT_PORT,
    host: Annotated[
        str, typer.Option(help="Address to listen on (loopback by default; see docs/deployment.md).")
    ] = "127.0.0.1",
    ui_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--ui-origin",
            help="Origin of the Temporal UI allowed to call this server (repeatable), e.g. "
            "https://temporal.example.com. Default: the origin of $PITSTOP_UI_URL.",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
) -> None:
    """Serve /encode and /decode for the Temporal UI with this process's payload keys."""
    # Light imports only: `pitstop dev up --codec` waits for this server to answer.
    from pitstop.codec import AesGcmCodec
    from pitstop.codec_claimcheck import claim_check_for
    from pitstop.codec_keys import KEY_ENV, KEY_FILE_ENV, CodecKeyError, keyring_for
    from pitstop.codec_server import OriginError, normalize_origin
    from pitstop.codec_server import serve as run_server
    from pitstop.payload_store import PayloadStoreError
    from pitstop.settings import Settings

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    settings = Settings.from_env()
    try:
        keyring = keyring_for(settings)
        origins = (
            [normalize_origin(o) for o in ui_origin] if ui_origin else default_ui_origins(settings.ui_url)
        )
    except (CodecKeyError, OriginError) as exc:
        _fail(str(exc))
        return
    if keyring is None:
        _fail(
            f"no payload encryption keys: set {KEY_ENV} or {KEY_FILE_ENV} "
            "(or start the embedded stack with `pitstop dev up --codec`)"
        )
        return
    try:
        # Resolves claim-check references too: the UI shows large payloads themselves.
        codec = claim_check_for(settings, AesGcmCodec(keyring))
    except PayloadStoreError as exc:
        _fail(str(exc))
        return
    about = f"{keyring.describe()}; {codec.describe()}"
    try:
        asyncio.run(run_server(codec, origins, host, port, about))
    except OSError as exc:
        _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")


@codec_app.command()
def keygen(
    key_id: Annotated[
        str | None, typer.Option("--id", help="Key id (default: k<date>-<random>); 1-40 of [A-Za-z0-9._-].")
    ] = None,
) -> None:
    """Print a new key, `<key id>:<base64 of 32 random bytes>`, for PITSTOP_CODEC_KEY(_FILE)."""
    from pitstop.codec_keys import CodecKeyError, generate_key

    try:
        typer.echo(generate_key(key_id))
    except CodecKeyError as exc:
        _fail(str(exc))


@codec_app.command()
def show() -> None:
    """Say whether this environment encrypts payloads, with which key ids (never the keys)."""
    from pitstop.client import converter_for, encryption_summary
    from pitstop.codec_keys import CodecKeyError, keyring_for
    from pitstop.settings import Settings

    try:
        keyring = keyring_for(Settings.from_env())
    except CodecKeyError as exc:
        _fail(str(exc))
        return
    typer.echo(f"payload encryption: {encryption_summary(converter_for(keyring))}")


if __name__ == "__main__":
    # `python -m pitstop.cli.codec serve`: what the embedded stack runs (no other CLI area loaded).
    codec_app()
