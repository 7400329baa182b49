"""`pitstop codec serve`: a Temporal codec server, so the Temporal UI (and `temporal
--codec-endpoint`) can show what pitstop encrypted.

Protocol (Temporal's "Codec Server"): `POST /encode` and `POST /decode` (also under
`/<namespace>/`) take and return `{"payloads": [...]}` in protobuf JSON (bytes as base64).
The UI calls them from the user's browser with `Content-Type: application/json`,
`X-Namespace` and, when configured, `Authorization`, so the browser first sends an
`OPTIONS` preflight.

Who may use it: a request that carries an `Origin` header comes from a web page, and is
answered only when that origin is one of the configured UI origins (`--ui-origin`); any
other origin gets 403 and no CORS allowance, so a page on another site cannot use this
server (from a user's browser on the inside) to decrypt history.

It decodes with the full pitstop codec (pitstop.client.data_converter): a claim-check
reference (a payload too large for Temporal, kept in the payload store) is resolved from this
process's store and decrypted, so the UI shows the payload itself; this server must therefore
use the same `PITSTOP_PAYLOAD_STORE` as the workers. Requests without an
`Origin` come from programs (the Temporal CLI, curl); a browser cannot send those. CORS is
not authentication: anyone who can reach the port with a program can decode, so in
production the server listens on loopback or a private network behind an authenticating
proxy (see docs/deployment.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from urllib.parse import urlsplit

from aiohttp import hdrs, web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import PayloadCodec

from pitstop.codec import PayloadCodecError

log = logging.getLogger("pitstop.codec_server")

# What the Temporal UI sends (services/data-encoder.ts): JSON body, the namespace, and the
# user's access token when `codec.passAccessToken` is on.
ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"
# Histories are decoded a page at a time; Temporal caps one payload at 2 MiB by default.
MAX_BODY_BYTES = 16 * 1024 * 1024


class OriginError(ValueError):
    """A `--ui-origin` that is not an origin (`scheme://host[:port]`)."""


def normalize_origin(raw: str) -> str:
    """`http://Host:8233/` -> `http://host:8233`: what browsers put in the Origin header."""
    parts = urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OriginError(
            f"{raw!r} is not an origin; expected scheme://host[:port], e.g. http://127.0.0.1:8233"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise OriginError(
            f"{raw!r} is not an origin: leave out the path, e.g. {parts.scheme}://{parts.netloc}"
        )
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}[parts.scheme]
    port = f":{parts.port}" if parts.port is not None and parts.port != default else ""
    return f"{parts.scheme}://{host}{port}"


def loopback_twins(origin: str) -> list[str]:
    """The origin and, for 127.0.0.1/localhost, the other name: people open either."""
    parts = urlsplit(origin)
    twins = {"127.0.0.1": "localhost", "localhost": "127.0.0.1"}
    other = twins.get(parts.hostname or "")
    if other is None:
        return [origin]
    port = f":{parts.port}" if parts.port is not None else ""
    return [origin, f"{parts.scheme}://{other}{port}"]


def _cors(response: web.StreamResponse, origin: str) -> None:
    response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
    # The UI's `codec.includeCredentials` sends cookies for an authenticating proxy.
    response.headers[hdrs.ACCESS_CONTROL_ALLOW_CREDENTIALS] = "true"
    response.headers[hdrs.VARY] = "Origin"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers={hdrs.VARY: "Origin"})


def build_app(codec: PayloadCodec, ui_origins: Iterable[str]) -> web.Application:
    """The aiohttp application: /encode, /decode (POST + OPTIONS) and /health."""
    allowed = frozenset(normalize_origin(o) for o in ui_origins)

    def refused_origin(request: web.Request) -> web.Response | None:
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is None or origin in allowed:
            return None
        log.warning("refused a %s %s from origin %r", request.method, request.path, origin[:200])
        return _error(
            403, "this origin may not use the codec server; start it with --ui-origin <the UI's origin>"
        )

    async def preflight(request: web.Request) -> web.Response:
        refusal = refused_origin(request)
        if refusal is not None:
            return refusal
        response = web.Response(status=204)
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is not None:
            _cors(response, origin)
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_METHODS] = "POST, OPTIONS"
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = ALLOWED_HEADERS
            response.headers[hdrs.ACCESS_CONTROL_MAX_AGE] = "600"
        return response

    def handler(
        transform: Callable[[Sequence[Payload]], Awaitable[list[Payload]]], name: str
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            refusal = refused_origin(request)
            if refusal is not None:
                return refusal
            if request.content_type != "application/json":
                return _error(415, "send the payloads as Content-Type: application/json")
            try:
                payloads = json_format.Parse(await request.read(), Payloads())
            except json_format.ParseError as exc:
                return _error(400, f'the body is not {{"payloads": [...]}} in protobuf JSON: {exc}')
            try:
                result = Payloads(payloads=await transform(payloads.payloads))
            except PayloadCodecError as exc:
                log.warning("%s of %d payload(s) failed: %s", name, len(payloads.payloads), exc)
                response = _error(400, str(exc))
            else:
                response = web.json_response(text=json_format.MessageToJson(result))
            origin = request.headers.get(hdrs.ORIGIN)
            if origin is not None:
                _cors(response, origin)
            return response

        return handle

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    routes = [web.get("/health", health)]
    # Also under a namespace segment, for `temporal --codec-endpoint 'http://host/{namespace}'`;
    # one keyring serves every namespace.
    for prefix in ("", "/{namespace}"):
        routes += [
            web.post(f"{prefix}/encode", handler(codec.encode, "encode")),
            web.post(f"{prefix}/decode", handler(codec.decode, "decode")),
            web.options(f"{prefix}/encode", preflight),
            web.options(f"{prefix}/decode", preflight),
        ]
    app.add_routes(routes)
    return app


async def serve(codec: PayloadCodec, ui_origins: Sequence[str], host: str, port: int, about: str) -> None:
    """Serve until cancelled (SIGTERM/SIGINT end `asyncio.run`); `about` says which keys and
    payload store the codec uses, for the log."""
    import asyncio
    import signal

    runner = web.AppRunner(build_app(codec, ui_origins), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    log.info(
        "codec server on http://%s:%d for UI origin(s) %s; %s",
        host,
        port,
        ", ".join(ui_origins),
        about,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
