"""Who a Slack user is to pitstop: the approver name gates check votes against.

The mapping file (`PITSTOP_SLACK_APPROVERS`, YAML):

    users:                  # Slack user id -> approver name (checked first)
      U0123ABCD: alice
    emails:                 # Slack profile e-mail -> approver name
      bob@example.com: bob
    email_domains:          # or: the e-mail's local part, for these domains only
      - example.com

A user found in neither is not mapped: their clicks are refused before they reach a run.
Local parts are trusted only for the listed domains, because a Slack workspace can hold
guests and shared-channel members whose addresses pitstop's approvers do not own.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from ruamel.yaml.error import YAMLError

from pitstop.safe_yaml import safe_load_file


class ApproverMapError(ValueError):
    """The mapping file cannot be used; the message names the file and the problem."""


class ApproverMap(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    users: dict[str, str] = Field(default_factory=dict)
    emails: dict[str, str] = Field(default_factory=dict)
    email_domains: list[str] = Field(default_factory=list)

    @field_validator("emails")
    @classmethod
    def _lower_emails(cls, value: dict[str, str]) -> dict[str, str]:
        return {k.strip().lower(): v for k, v in value.items()}

    @field_validator("email_domains")
    @classmethod
    def _lower_domains(cls, value: list[str]) -> list[str]:
        return [d.strip().lower().lstrip("@") for d in value]

    @property
    def needs_profile(self) -> bool:
        """Whether a user missing from `users` could still be found by e-mail."""
        return bool(self.emails or self.email_domains)

    def by_user(self, user_id: str) -> str | None:
        return self.users.get(user_id)

    def by_email(self, email: str | None) -> str | None:
        if not email or "@" not in email:
            return None
        address = email.strip().lower()
        if address in self.emails:
            return self.emails[address]
        local, _, domain = address.rpartition("@")
        if domain in self.email_domains and local:
            return local
        return None

    def slack_id(self, approver: str) -> str | None:
        """The Slack user of an approver, to mention them (the first match in `users`)."""
        return next((uid for uid, name in sorted(self.users.items()) if name == approver), None)


def load_approver_map(path: Path | None) -> ApproverMap:
    """The mapping in `path`; an empty mapping when no file is configured."""
    if path is None:
        return ApproverMap()
    try:
        data = safe_load_file(path)
    except OSError as exc:
        raise ApproverMapError(f"PITSTOP_SLACK_APPROVERS={path}: cannot read it: {exc.strerror}") from None
    except YAMLError as exc:
        raise ApproverMapError(f"PITSTOP_SLACK_APPROVERS={path}: not valid YAML: {exc}") from None
    if data is None:
        return ApproverMap()
    if not isinstance(data, dict):
        raise ApproverMapError(
            f"PITSTOP_SLACK_APPROVERS={path}: expected a mapping with `users`, `emails`, `email_domains`"
        )
    try:
        return ApproverMap.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'file'}: {err['msg']}" for err in exc.errors()
        )
        raise ApproverMapError(f"PITSTOP_SLACK_APPROVERS={path}: {problems}") from None
