"""Slack, as far as pitstop can tell: a recording Web API server, and clicks signed the way
Slack signs them. The only stand-in in these tests: everything else is real.

`FakeSlack` answers the Web API methods pitstop calls (`auth.test`, `chat.postMessage`,
`chat.update`, `chat.postEphemeral`, `views.open`, `users.info`) over real HTTP with the JSON
Slack answers, checks the bearer token, and records every call. `Clicker` sends interaction
payloads to the bridge exactly as Slack does: `payload=<urlencoded JSON>` with
`X-Slack-Request-Timestamp` and `X-Slack-Signature: v0=HMAC-SHA256(secret, "v0:{ts}:{body}")`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import socket
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiohttp import web

BOT_TOKEN = "xoxb-pitstop-test-token"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM_ID = "T0PITSTOP"


def channel_id(name: str) -> str:
    """Slack answers with channel ids; a name maps to a stable id, an id to itself."""
    if name.startswith(("C", "G", "D")) and name.isupper():
        return name
    return "C" + hashlib.sha1(name.lstrip("#").encode()).hexdigest()[:8].upper()


@dataclass
class SlackCall:
    method: str
    args: dict[str, Any]
    at: float
    answer: dict[str, Any] = field(default_factory=dict)

    @property
    def channel(self) -> str:
        """The channel id of the message this call posted or updated."""
        return str(self.answer.get("channel") or self.args["channel"])

    @property
    def ts(self) -> str:
        return str(self.answer.get("ts") or self.args["ts"])


@dataclass
class FakeSlack:
    """Users: Slack user id -> (name, e-mail)."""

    users: dict[str, tuple[str, str]] = field(default_factory=dict)
    calls: list[SlackCall] = field(default_factory=list)
    # method -> Slack error code to answer instead of success (until cleared).
    errors: dict[str, str] = field(default_factory=dict)
    port: int = 0
    _runner: web.AppRunner | None = None
    _ts: Any = field(default_factory=lambda: itertools.count(1))

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    async def start(self) -> None:
        app = web.Application()
        app.add_routes([web.route("*", "/api/{method}", self._handle)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.create_server(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self.port = int(sock.getsockname()[1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # --- what tests read ---------------------------------------------------------------
    def called(self, method: str, **match: Any) -> list[SlackCall]:
        return [
            c for c in self.calls if c.method == method and all(c.args.get(k) == v for k, v in match.items())
        ]

    async def wait_for(
        self, method: str, predicate: Callable[[SlackCall], bool] = lambda _: True, within: float = 20.0
    ) -> SlackCall:
        deadline = time.monotonic() + within
        while True:
            found = [c for c in self.calls if c.method == method and predicate(c)]
            if found:
                return found[-1]
            if time.monotonic() > deadline:
                seen = [(c.method, c.args.get("text")) for c in self.calls]
                raise AssertionError(f"no {method} call matched within {within}s; calls: {seen}")
            await asyncio.sleep(0.02)

    # --- the Web API -----------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                args.update(await request.json())
            else:
                args.update(dict(await request.post()))
        call = SlackCall(method=method, args=args, at=time.time())
        self.calls.append(call)
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
            call.answer = {"ok": False, "error": "invalid_auth"}
        elif method in self.errors:
            call.answer = {"ok": False, "error": self.errors[method]}
        else:
            respond = getattr(self, "_" + method.replace(".", "_"), None)
            call.answer = respond(args) if respond else {"ok": False, "error": "unknown_method"}
        return web.json_response(call.answer)

    def _next_ts(self) -> str:
        return f"{1_700_000_000 + next(self._ts)}.{next(self._ts):06d}"

    def _auth_test(self, _: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://pitstop-test.slack.com/",
            "team": "pitstop-test",
            "user": "pitstop",
            "team_id": TEAM_ID,
            "user_id": "U0PITSTOPBOT",
            "bot_id": "B0PITSTOPBOT",
            "is_enterprise_install": False,
        }

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = channel_id(str(args["channel"]))
        ts = self._next_ts()
        message = {"type": "message", "user": "U0PITSTOPBOT", "bot_id": "B0PITSTOPBOT", "ts": ts}
        message |= {k: args[k] for k in ("text", "blocks", "thread_ts") if k in args}
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "channel": args["channel"], "ts": args["ts"], "text": args.get("text", "")}

    def _chat_postEphemeral(self, _: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "message_ts": self._next_ts()}

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        view = args["view"] if isinstance(args["view"], dict) else json.loads(args["view"])
        return {"ok": True, "view": {"id": "V0PITSTOP", "team_id": TEAM_ID, **view}}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args.get("user"))
        if user not in self.users:
            return {"ok": False, "error": "user_not_found"}
        name, email = self.users[user]
        profile = {"real_name": name, "display_name": name, "email": email}
        return {
            "ok": True,
            "user": {"id": user, "team_id": TEAM_ID, "name": name, "deleted": False, "is_bot": False,
                     "profile": profile},
        }  # fmt: skip


def slack_signature(secret: str, timestamp: str, body: str) -> str:
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


@dataclass
class Clicker:
    """Sends interactions to the bridge as Slack would (signed, form-encoded `payload=`)."""

    url: str
    secret: str = SIGNING_SECRET
    # A client kept open across clicks (as Slack's own senders are); None opens one per click.
    http: httpx.AsyncClient | None = None

    async def post(
        self, payload: dict[str, Any], *, secret: str | None = None, age_s: float = 0.0
    ) -> httpx.Response:
        body = "payload=" + urllib.parse.quote(json.dumps(payload))
        timestamp = str(int(time.time() - age_s))
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": slack_signature(secret or self.secret, timestamp, body),
            "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
        }
        if self.http is not None:
            return await self.http.post(self.url, content=body, headers=headers)
        async with httpx.AsyncClient(timeout=10) as client:
            return await client.post(self.url, content=body, headers=headers)

    async def click(self, message: SlackCall, user: str, approve: bool = True, **kw: Any) -> httpx.Response:
        return await self.post(block_actions(message, user, approve), **kw)


def buttons(message: SlackCall) -> list[dict[str, Any]]:
    """The buttons of a posted or updated message (empty when it has none)."""
    return [
        element
        for block in message.args.get("blocks") or []
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        if element.get("type") == "button"
    ]


def block_actions(message: SlackCall, user: str, approve: bool) -> dict[str, Any]:
    """The `block_actions` payload Slack sends when `user` clicks Approve or Reject."""
    wanted = "pitstop_approve" if approve else "pitstop_reject"
    button = next(b for b in buttons(message) if b["action_id"] == wanted)
    channel, ts = message.channel, message.ts
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM_ID},
        "api_app_id": "A0PITSTOP",
        "token": "verification-token-unused",
        "container": {"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": False},
        "trigger_id": f"{ts}.{user}.trigger",
        "team": {"id": TEAM_ID, "domain": "pitstop-test"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "ops"},
        "message": {
            "type": "message",
            "ts": ts,
            "text": message.args.get("text"),
            "blocks": message.args.get("blocks"),
        },
        "state": {"values": {}},
        "response_url": "https://hooks.slack.com/actions/T0PITSTOP/1/unused",
        "actions": [
            {
                "action_id": button["action_id"],
                "block_id": "pitstop_gate",
                "text": button["text"],
                "value": button["value"],
                "style": button.get("style"),
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


def view_submission(opened: SlackCall, user: str, comment: str) -> dict[str, Any]:
    """The `view_submission` payload Slack sends when `user` submits the dialog `views.open` showed."""
    view = opened.args["view"] if isinstance(opened.args["view"], dict) else json.loads(opened.args["view"])
    values = {"pitstop_comment": {"comment": {"type": "plain_text_input", "value": comment}}}
    return {
        "type": "view_submission",
        "team": {"id": TEAM_ID, "domain": "pitstop-test"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM_ID},
        "api_app_id": "A0PITSTOP",
        "token": "verification-token-unused",
        "trigger_id": f"{time.time():.6f}.{user}.submit",
        "view": {**opened.answer["view"], **view, "state": {"values": values}, "hash": "1700000000.abcdef"},
        "response_urls": [],
        "is_enterprise_install": False,
    }
