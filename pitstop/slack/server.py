"""`pitstop slack serve`: the bridge over HTTP (aiohttp), or over Socket Mode.

HTTP mode serves Slack's Interactivity Request URL at `POST /slack/events` and a liveness
probe at `GET /healthz`. Socket Mode (`--socket-mode`, needs SLACK_APP_TOKEN) opens an
outbound WebSocket to Slack instead, for installations Slack cannot reach.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from dataclasses import dataclass

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient
from temporalio.client import Client

from pitstop.keys import KeyRing, require_key
from pitstop.slack.app import Bridge
from pitstop.slack.config import SlackSettings
from pitstop.slack.identity import load_approver_map

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
log = logging.getLogger("pitstop.slack")


def web_client(settings: SlackSettings) -> AsyncWebClient:
    return AsyncWebClient(token=settings.token(), base_url=settings.api_url, timeout=10)


def build_bridge(settings: SlackSettings, temporal: Client, vote_key: KeyRing | None = None) -> Bridge:
    """The bridge; its vote key from the environment unless given (KeyConfigError without one)."""
    return Bridge(
        settings,
        temporal,
        load_approver_map(settings.approvers_file),
        web_client(settings),
        vote_key or require_key("vote"),
    )


def web_app(app: AsyncApp) -> web.Application:
    async def events(request: web.Request) -> web.Response:
        return await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    application = web.Application()
    application.add_routes([web.post(EVENTS_PATH, events), web.get(HEALTH_PATH, health)])
    return application


@dataclass
class RunningBridge:
    runner: web.AppRunner
    port: int

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_http(app: AsyncApp, host: str, port: int) -> RunningBridge:
    """Serve the bridge on host:port (port 0 picks a free one) until `stop()`."""
    runner = web.AppRunner(web_app(app), access_log=None)
    await runner.setup()
    # Bind the socket here so that port 0 (tests, benchmarks) tells which port it got.
    sock = socket.create_server((host, port), reuse_port=False)
    await web.SockSite(runner, sock).start()
    bound = int(sock.getsockname()[1])
    return RunningBridge(runner=runner, port=bound)


async def serve(
    settings: SlackSettings,
    temporal: Client,
    host: str,
    port: int,
    socket_mode: bool,
    vote_key: KeyRing | None = None,
) -> None:
    """Run until SIGTERM/SIGINT."""
    bridge = build_bridge(settings, temporal, vote_key)
    app = bridge.bolt_app()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if socket_mode:
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

        assert settings.app_token is not None
        handler = AsyncSocketModeHandler(app, settings.app_token.get_secret_value())
        await handler.connect_async()  # type: ignore[no-untyped-call]
        log.info("Slack bridge connected over Socket Mode")
        await stop.wait()
        await handler.close_async()  # type: ignore[no-untyped-call]
        return
    running = await start_http(app, host, port)
    log.info("Slack bridge listening on http://%s:%d%s", host, running.port, EVENTS_PATH)
    await stop.wait()
    await running.stop()
