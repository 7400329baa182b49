"""Who a Slack user is to pitstop: the approvers mapping file, and its error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.slack.identity import ApproverMap, ApproverMapError, load_approver_map


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "approvers.yaml"
    path.write_text(text)
    return path


def test_users_map_slack_ids_and_emails_map_addresses_case_insensitively(tmp_path: Path) -> None:
    mapping = load_approver_map(
        write(tmp_path, "users: {U01: alice}\nemails: {Bob.Smith@Example.com: bob}\n")
    )
    assert mapping.by_user("U01") == "alice" and mapping.by_user("U02") is None
    assert mapping.by_email("bob.smith@example.com") == "bob"
    assert mapping.slack_id("alice") == "U01" and mapping.slack_id("bob") is None


def test_the_email_local_part_is_trusted_only_in_listed_domains() -> None:
    mapping = ApproverMap(email_domains=["@Example.com"])
    assert mapping.by_email("carol@example.com") == "carol"
    assert mapping.by_email("carol@example.com.evil.test") is None
    assert mapping.by_email("carol@elsewhere.test") is None
    assert mapping.by_email("") is None and mapping.by_email(None) is None
    assert mapping.needs_profile and not ApproverMap(users={"U1": "a"}).needs_profile


def test_no_file_means_nobody_is_mapped() -> None:
    mapping = load_approver_map(None)
    assert mapping.by_user("U01") is None and mapping.by_email("a@example.com") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("users: [alice]\n", "users: Input should be a valid dictionary"),
        ("user: {U1: alice}\n", "user: Extra inputs are not permitted"),
        ("- alice\n", "expected a mapping with `users`, `emails`, `email_domains`"),
        ("users: {U1: [alice\n", "not valid YAML"),
    ],
)
def test_a_bad_mapping_file_names_the_file_and_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ApproverMapError) as info:
        load_approver_map(path)
    assert str(info.value).startswith(f"PITSTOP_SLACK_APPROVERS={path}: ")
    assert message in str(info.value)


def test_a_missing_mapping_file_says_it_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(ApproverMapError, match="cannot read it: No such file or directory"):
        load_approver_map(tmp_path / "nope.yaml")
