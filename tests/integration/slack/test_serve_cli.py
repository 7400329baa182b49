"""`pitstop slack serve` as its own process: what the compose service runs."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from pitstop.settings import Settings
from pitstop.slack.config import SlackSettings
from pitstop.slack.contracts import ButtonValue
from tests.integration.slack.slackfake import Clicker, FakeSlack, SlackCall

# The typer app the lead mounts as `pitstop slack`; run on its own, as the entry point would.
SERVE = [sys.executable, "-c", "from pitstop.cli.slack import slack_app; slack_app()", "serve"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(
    temporal_settings: Settings, slack_env: SlackSettings
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": temporal_settings.temporal_address,
        "OTEL_TRACES_EXPORTER": "none",
    }
    proc = subprocess.Popen(
        [*SERVE, "--host", "127.0.0.1", "--port", str(port), "--log-level", "WARNING"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield f"http://127.0.0.1:{port}", proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


async def healthy(base: str, proc: subprocess.Popen[str]) -> None:
    async with httpx.AsyncClient(timeout=1) as client:
        for _ in range(300):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
            try:
                if (await client.get(f"{base}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("the bridge never became healthy")


def a_gate_message() -> SlackCall:
    value = ButtonValue(run="some-run", gate="fleet:before").model_dump_json()
    button = {
        "type": "button",
        "action_id": "pitstop_approve",
        "text": {"type": "plain_text", "text": "Approve"},
    }
    blocks = [{"type": "actions", "block_id": "pitstop_gate", "elements": [{**button, "value": value}]}]
    return SlackCall(
        method="chat.postMessage",
        args={"channel": "#ops", "text": "Approval needed: fleet:before", "blocks": blocks},
        at=0.0,
        answer={"ok": True, "channel": "C0OPS", "ts": "1700000000.000100"},
    )


async def test_the_served_bridge_refuses_forgeries_and_answers_unmapped_users(
    served: tuple[str, subprocess.Popen[str]], slack: FakeSlack
) -> None:
    base, proc = served
    await healthy(base, proc)
    clicker = Clicker(url=f"{base}/slack/events")
    assert (await clicker.click(a_gate_message(), "U0NOBODY", secret="forged")).status_code == 401
    assert slack.called("chat.postEphemeral") == []
    assert (await clicker.click(a_gate_message(), "U0NOBODY")).status_code == 200
    told = await slack.wait_for("chat.postEphemeral")
    assert (told.args["channel"], told.args["user"]) == ("C0OPS", "U0NOBODY")
    assert "not mapped to a pitstop approver" in told.args["text"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_serve_without_slack_settings_names_what_is_missing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    done = subprocess.run([*SERVE], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "needs SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET in its environment" in done.stderr
