"""`pitstop dev up|down|status`: the embedded stack from the command line."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pitstop.codec_keys import CodecKeyError
from pitstop.devstack import (
    ALL_PARTS,
    EVERY_PART,
    OPTIONAL_PARTS,
    DevStack,
    DevStackError,
    PartName,
    PartStatus,
    StackConfig,
)
from pitstop.payload_store import PayloadStoreError

dev_app = typer.Typer(
    help="The embedded stack (Temporal dev server, S3, etcd) on loopback, for demos and tests.",
    no_args_is_help=True,
    add_completion=False,
)

console = Console()
err_console = Console(stderr=True)

HomeOpt = Annotated[
    Path | None, typer.Option("--home", help="State directory (default: $PITSTOP_HOME or ./.pitstop).")
]
TemporalPortOpt = Annotated[
    int | None, typer.Option(help="Temporal gRPC port (default: $PITSTOP_TEMPORAL_PORT or 7233).")
]
UiPortOpt = Annotated[int | None, typer.Option(help="Temporal UI port (default: $PITSTOP_UI_PORT or 8233).")]
S3PortOpt = Annotated[int | None, typer.Option(help="S3 (moto) port (default: $PITSTOP_S3_PORT or 9000).")]
EtcdPortOpt = Annotated[
    int | None, typer.Option(help="etcd client port (default: $PITSTOP_ETCD_PORT or 2379).")
]
EtcdPeerPortOpt = Annotated[
    int | None, typer.Option(help="etcd peer port (default: $PITSTOP_ETCD_PEER_PORT or 2380).")
]


def _config(
    home: Path | None,
    temporal_port: int | None = None,
    ui_port: int | None = None,
    s3_port: int | None = None,
    etcd_port: int | None = None,
    etcd_peer_port: int | None = None,
    parts: tuple[PartName, ...] | None = None,
    codec_port: int | None = None,
    codec: bool | None = None,
) -> StackConfig:
    """Saved config of the home (ports `up` used last), then environment, then options."""
    home = home or Path(os.environ.get("PITSTOP_HOME") or StackConfig().home)
    return StackConfig.from_env(
        base=StackConfig.saved(home),
        home=home,
        temporal_port=temporal_port,
        ui_port=ui_port,
        s3_port=s3_port,
        etcd_client_port=etcd_port,
        etcd_peer_port=etcd_peer_port,
        parts=parts,
        codec_port=codec_port,
        codec=codec,
    )


def _parse_parts(raw: str | None) -> tuple[PartName, ...] | None:
    if raw is None:
        return None
    chosen: list[PartName] = []
    for name in (p.strip() for p in raw.split(",") if p.strip()):
        match = [p for p in ALL_PARTS if p == name]  # "codec" follows --codec, not --parts
        if not match:
            raise typer.BadParameter(f"unknown part {name!r} (choose from {', '.join(ALL_PARTS)})")
        chosen.append(match[0])
    return tuple(chosen)


def _with_parts(parts: tuple[PartName, ...] | None, extra: list[str] | None) -> tuple[PartName, ...] | None:
    """`--with prometheus`: optional parts on top of the chosen (or default) ones."""
    if not extra:
        return parts
    chosen = list(parts or ALL_PARTS)
    for name in (n.strip() for raw in extra for n in raw.split(",") if n.strip()):
        match = [p for p in OPTIONAL_PARTS if p == name]
        if not match:
            raise typer.BadParameter(
                f"unknown optional part {name!r} (choose from {', '.join(OPTIONAL_PARTS)})"
            )
        if match[0] not in chosen:
            chosen.append(match[0])
    return tuple(chosen)


def prometheus_line(stack: DevStack) -> str | None:
    if "prometheus" not in stack.parts:
        return None
    return (
        f"Prometheus: {stack.prometheus_url} (alerts: {stack.prometheus_url}/alerts; rehearsal "
        f"clusters of `pitstop sim serve` are scraped; config in {stack.home / 'prometheus'})"
    )


def _status_table(stack: DevStack, statuses: list[PartStatus], title: str) -> Table:
    table = Table(title=title)
    table.add_column("part")
    table.add_column("listens on")
    table.add_column("pid", justify="right")
    table.add_column("running")
    table.add_column("healthy")
    table.add_column("detail", overflow="fold")
    for s in statuses:
        table.add_row(
            s.name,
            s.endpoint if s.name != "temporal" else f"{s.endpoint} (UI {stack.ui_url})",
            str(s.pid) if s.pid is not None else "-",
            "[green]yes[/]" if s.running else "[red]no[/]",
            "[green]yes[/]" if s.healthy else "[red]no[/]",
            "" if s.healthy else s.detail,
        )
    return table


def encryption_line(stack: DevStack) -> str:
    """Whether processes of this home (with this shell's environment) encrypt payloads, and
    whether the UI can show them."""
    try:
        keyring = stack.codec_keyring()
    except CodecKeyError as exc:
        return f"payload encryption: [red]keys unusable[/]: {exc}"
    if keyring is None:
        return "payload encryption: off (`pitstop dev up --codec` turns it on)"
    line = f"payload encryption: [green]on[/], {keyring.describe()}"
    endpoint = stack.ui_codec_endpoint()
    if endpoint is not None:
        return f"{line}; the Temporal UI decodes through {endpoint}"
    if stack.running_pid("temporal") is not None:
        return (
            f"{line}; [yellow]the Temporal UI was started without the codec server[/] "
            "(`pitstop dev down` then `pitstop dev up --codec` points it there)"
        )
    return line


def payload_store_line(stack: DevStack) -> str:
    """Where processes of this home (with this shell's environment) put large payloads."""
    try:
        where = stack.payload_store().describe()
    except PayloadStoreError as exc:
        return f"payload store: [red]unusable[/]: {exc}"
    return (
        f"payload store: {where} (payloads over the claim-check threshold; shared by this home's processes)"
    )


@dev_app.command()
def up(
    home: HomeOpt = None,
    temporal_port: TemporalPortOpt = None,
    ui_port: UiPortOpt = None,
    s3_port: S3PortOpt = None,
    etcd_port: EtcdPortOpt = None,
    etcd_peer_port: EtcdPeerPortOpt = None,
    parts: Annotated[
        str | None, typer.Option(help="Comma-separated parts to start (default: temporal,s3,etcd).")
    ] = None,
    codec: Annotated[
        bool,
        typer.Option(
            "--codec",
            help="Encrypt payloads: write a key to <home>/codec.keys (once), which every pitstop "
            "process of this home then uses, run the codec server and point the UI at it.",
        ),
    ] = False,
    codec_port: Annotated[
        int | None, typer.Option(help="Codec server port (default: $PITSTOP_CODEC_PORT or 8081).")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for every part to be healthy.")] = 30.0,
    with_parts: Annotated[
        list[str] | None,
        typer.Option(
            "--with",
            help="Optional parts to start too: prometheus (Debian's /usr/bin/prometheus with the "
            "alert pack, scraping rehearsal clusters and the worker; port $PITSTOP_PROMETHEUS_PORT "
            "or 9090).",
        ),
    ] = None,
) -> None:
    """Start the stack (a no-op for parts already running) and print where each part listens."""
    wanted = _config(
        home,
        temporal_port,
        ui_port,
        s3_port,
        etcd_port,
        etcd_peer_port,
        _with_parts(_parse_parts(parts), with_parts),
        codec_port=codec_port,
        codec=True if codec else None,
    )
    stack = DevStack(wanted)
    saved = StackConfig.saved(wanted.home)
    if saved is not None and any(stack.running_pid(p) is not None for p in EVERY_PART):
        # Already (partly) running: its ports are fixed until `down`; report those.
        if saved.model_copy(update={"parts": wanted.parts}) != wanted:
            err_console.print(
                "[yellow]the stack is already running; keeping its ports (run `pitstop dev down` "
                "to change them)[/]"
            )
        stack = DevStack(
            saved.model_copy(update={"parts": wanted.parts, "codec": wanted.codec or saved.codec})
        )
    started = time.monotonic()
    try:
        statuses = stack.up(timeout=timeout)
    except DevStackError as exc:
        err_console.print(f"[red]pitstop dev up failed:[/] {exc}", highlight=False)
        raise typer.Exit(code=1) from None
    elapsed = time.monotonic() - started
    console.print(_status_table(stack, statuses, f"pitstop dev stack ({elapsed:.1f}s)"))
    console.print(f"Temporal UI: [link={stack.ui_url}]{stack.ui_url}[/link]", highlight=False)
    console.print(f"TEMPORAL_ADDRESS={stack.temporal_address}", highlight=False)
    if (line := prometheus_line(stack)) is not None:
        console.print(line, highlight=False)
    console.print(encryption_line(stack), highlight=False)
    console.print(payload_store_line(stack), highlight=False)
    console.print(f"logs: {stack.log_dir}", highlight=False)
    console.print(
        f"worker policy for this stack: {stack.policy_file} (`pitstop worker --show-policy`)", highlight=False
    )
    if not all(s.healthy for s in statuses):
        raise typer.Exit(code=1)


@dev_app.command()
def down(
    home: HomeOpt = None,
    grace: Annotated[float, typer.Option(help="Seconds between SIGTERM and SIGKILL.")] = 10.0,
) -> None:
    """Stop every part of the stack in the home directory."""
    stack = DevStack(_config(home))
    try:
        stopped = stack.down(grace=grace)
    except DevStackError as exc:
        err_console.print(f"[red]pitstop dev down failed:[/] {exc}", highlight=False)
        raise typer.Exit(code=1) from None
    if stopped:
        console.print(f"stopped: {', '.join(stopped)}", highlight=False)
    else:
        console.print(f"nothing was running in {stack.home}", highlight=False)


@dev_app.command()
def status(home: HomeOpt = None) -> None:
    """Show running/healthy per part; exit code 1 when any part is down or unhealthy."""
    stack = DevStack(_config(home))
    statuses = stack.status()
    console.print(_status_table(stack, statuses, f"pitstop dev stack in {stack.home}"))
    if (line := prometheus_line(stack)) is not None:
        console.print(line, highlight=False)
    console.print(encryption_line(stack), highlight=False)
    console.print(payload_store_line(stack), highlight=False)
    if not all(s.running and s.healthy for s in statuses):
        raise typer.Exit(code=1)


if __name__ == "__main__":
    # `python -m pitstop.cli.dev up` works even when another CLI area fails to import.
    dev_app()
