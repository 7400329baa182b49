"""Slack settings from the environment, the vote ids clicks become, and `notify.slack` args."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from pitstop.keys import parse_keys
from pitstop.module_args.notify import SlackArgs
from pitstop.signing import valid
from pitstop.slack.config import SlackConfigError, SlackSettings, run_default_channel
from pitstop.slack.contracts import ButtonValue
from pitstop.slack.votes import private_update_id, signed_vote, update_id


def test_settings_come_from_the_environment_and_secrets_stay_hidden() -> None:
    settings = SlackSettings.from_env(
        {
            "SLACK_BOT_TOKEN": "xoxb-1",
            "SLACK_SIGNING_SECRET": "s3cret",
            "SLACK_DEFAULT_CHANNEL": " #ops ",
            "SLACK_API_URL": "http://127.0.0.1:9/api",
            "PITSTOP_UI_URL": "https://temporal.example",
        }
    )
    assert settings.token() == "xoxb-1" and settings.default_channel == "#ops"
    assert settings.api_url == "http://127.0.0.1:9/api/"  # slack_sdk appends the method name
    assert "xoxb-1" not in repr(settings) and "s3cret" not in repr(settings)
    assert SlackSettings.from_env({}).api_url == "https://slack.com/api/"


def test_a_bad_api_url_is_refused_with_the_variable_named() -> None:
    with pytest.raises(SlackConfigError, match=re.escape("SLACK_API_URL='slack.com/api' must be an http")):
        SlackSettings.from_env({"SLACK_API_URL": "slack.com/api"})


def test_the_bridge_names_every_missing_variable() -> None:
    with pytest.raises(
        SlackConfigError, match="needs SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET in its environment"
    ):
        SlackSettings.from_env({}).require_bridge()
    socket = SlackSettings.from_env({"SLACK_BOT_TOKEN": "xoxb-1"})
    with pytest.raises(SlackConfigError, match="needs SLACK_APP_TOKEN in"):
        socket.require_bridge(socket_mode=True)
    with pytest.raises(SlackConfigError, match="SLACK_BOT_TOKEN is not set"):
        SlackSettings.from_env({}).token()


def test_the_run_default_channel_is_unset_when_empty() -> None:
    assert run_default_channel({"SLACK_DEFAULT_CHANNEL": "  "}) is None
    assert run_default_channel({"SLACK_DEFAULT_CHANNEL": "#runs"}) == "#runs"


def test_one_click_is_one_update_id_and_different_clicks_are_not() -> None:
    button = ButtonValue(run="r", gate="canary:before")
    click = update_id("1700000000.000100", "U1", button, True)
    assert click == update_id("1700000000.000100", "U1", button, True)
    assert click == "slack-1700000000.000100-U1-canary:before-approve"
    others = {
        update_id("1700000000.000100", "U1", button, False),
        update_id("1700000000.000100", "U2", button, True),
        update_id("1700000000.000999", "U1", button, True),
        update_id(
            "1700000000.000100", "U1", ButtonValue(run="r", gate="canary:before", escalated=True), True
        ),
    }
    assert click not in others and len(others) == 4


def test_a_click_becomes_a_signed_vote_whose_update_id_only_the_key_holder_can_tell() -> None:
    ring = parse_keys("vote", "ab" * 16 + "cd" * 8 + "0123456789abcdef", "test")
    other = parse_keys("vote", "12" * 16 + "34" * 8 + "0123456789abcdef", "test")
    click = "slack-1700000000.000100-U1-canary:before-approve"
    vote = signed_vote(ring, "r", "canary:before", True, "bob", "U1", click, "ok")
    assert vote.proof is not None and vote.source == "slack:U1"
    assert (vote.proof.subject, vote.proof.approver, vote.proof.click) == ("slack:U1", "bob", click)
    assert valid(ring, "vote", vote.proof.signed_part(), vote.proof.signature)
    assert not valid(other, "vote", vote.proof.signed_part(), vote.proof.signature)
    # One click, one Update id; nothing in it a person without the key could compute ahead.
    assert private_update_id(ring, click) == private_update_id(ring, click)
    assert private_update_id(ring, click) != private_update_id(other, click)
    assert "U1" not in private_update_id(ring, click) and "1700000000" not in private_update_id(ring, click)


def test_notify_slack_needs_text_or_blocks() -> None:
    with pytest.raises(ValidationError, match=re.escape("notify.slack needs `text` or `blocks`")):
        SlackArgs.model_validate({"channel": "#ops"})
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        SlackArgs.model_validate({"text": "hi", "chanel": "#ops"})
    assert SlackArgs.model_validate({"blocks": [{"type": "divider"}], "thread": "run"}).thread == "run"
