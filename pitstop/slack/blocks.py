"""Block Kit for pitstop's Slack messages: a gate's approval request (open, partly voted,
escalated, closed), the comment dialog, and run progress. Pure functions: dicts in, dicts out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pitstop.approvals import GateState
from pitstop.slack.contracts import ButtonValue, GateNotice, ModalMetadata

APPROVE_ACTION = "pitstop_approve"
REJECT_ACTION = "pitstop_reject"
GATE_ACTIONS_BLOCK = "pitstop_gate"
VOTE_CALLBACK = "pitstop_vote"
COMMENT_BLOCK = "pitstop_comment"
COMMENT_INPUT = "comment"
MAX_HOSTS_SHOWN = 20

Block = dict[str, Any]
# Approver name -> how to show it (a `<@U123>` mention when the name is mapped to a Slack user).
Mention = Callable[[str], str]


def escape(text: str) -> str:
    """Slack mrkdwn control characters in text that came from a runbook or a person."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plain(name: str) -> str:
    return escape(name)


def run_link(ui_url: str, namespace: str, run_id: str) -> str:
    return f"{ui_url.rstrip('/')}/namespaces/{namespace}/workflows/{run_id}"


def _text(text: str) -> Block:
    return {"type": "mrkdwn", "text": text}


def _section(text: str) -> Block:
    return {"type": "section", "text": _text(text[:3000])}


def _hosts(hosts: list[str]) -> str:
    shown = ", ".join(f"`{escape(h)}`" for h in hosts[:MAX_HOSTS_SHOWN])
    more = len(hosts) - MAX_HOSTS_SHOWN
    return f"{shown} and {more} more" if more > 0 else (shown or "none")


def _date(gate: GateState) -> str:
    assert gate.deadline is not None
    epoch = int(gate.deadline.timestamp())
    return f"<!date^{epoch}^{{date_short_pretty}} {{time}}|{gate.deadline.isoformat(timespec='seconds')}>"


def _rules(gate: GateState, mention: Mention) -> str:
    rule = gate.rule
    names = ", ".join(mention(a) for a in gate.allowed) or "nobody"
    parts = [f"{names} (quorum {gate.quorum})"]
    if rule.four_eyes:
        parts.append("four-eyes: not the requester")
    if rule.require_verified:
        parts.append("votes from Slack only")
    if rule.require_comment:
        parts.append("comment required")
    return "; ".join(parts)


def _votes(gate: GateState) -> str:
    lines = []
    for vote in gate.votes:
        verb = "approved" if vote.approve else "rejected"
        comment = f": “{escape(vote.comment)}”" if vote.comment else ""
        unverified = "" if vote.verified else " (unverified)"
        lines.append(f"{escape(vote.approver)}{unverified} {verb}{comment}")
    return "\n".join(lines)


def _buttons(notice: GateNotice) -> Block:
    value = ButtonValue(
        run=notice.run_id,
        gate=notice.gate.rule.gate_id,
        comment=notice.gate.rule.require_comment,
        escalated=notice.gate.escalated,
    ).model_dump_json(exclude_defaults=True)
    return {
        "type": "actions",
        "block_id": GATE_ACTIONS_BLOCK,
        "elements": [
            {
                "type": "button",
                "action_id": APPROVE_ACTION,
                "style": "primary",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": value,
            },
            {
                "type": "button",
                "action_id": REJECT_ACTION,
                "style": "danger",
                "text": {"type": "plain_text", "text": "Reject"},
                "value": value,
            },
        ],
    }


def gate_headline(gate: GateState) -> str:
    gid = gate.rule.gate_id
    if gate.status == "approved":
        return f"Approved: {gid}"
    if gate.status == "rejected":
        return f"Rejected: {gid}"
    return f"Escalated, approval needed: {gid}" if gate.escalated else f"Approval needed: {gid}"


def gate_message(
    notice: GateNotice, *, ui_url: str, namespace: str, mention: Mention = plain
) -> tuple[str, list[Block]]:
    """The fallback text and blocks of a gate's message in its current state. Buttons only
    while the gate is open: a closed gate's message cannot be clicked."""
    gate = notice.gate
    link = run_link(ui_url, namespace, notice.run_id)
    headline = gate_headline(gate)
    blocks: list[Block] = [{"type": "header", "text": {"type": "plain_text", "text": headline[:150]}}]
    if gate.rule.prompt:
        blocks.append(_section(f"*{escape(gate.rule.prompt)}*"))
    fields = [
        _text(f"*Run*\n<{link}|{escape(notice.run_id)}>"),
        _text(f"*Runbook*\n{escape(notice.runbook)}"),
        _text(f"*Stage*\n{escape(notice.stage)}"),
        _text(f"*Requested by*\n{escape(notice.requested_by)}"),
        _text(f"*Approvers*\n{_rules(gate, mention)}"),
    ]
    if gate.deadline is not None and gate.status == "open":
        action = gate.rule.on_timeout if not gate.escalated else "reject"
        fields.append(_text(f"*Deadline*\n{_date(gate)} (then {action})"))
    blocks.append({"type": "section", "fields": fields})
    blocks.append(_section(f"*Hosts*\n{_hosts(notice.hosts)}"))
    votes = _votes(gate)
    if gate.status == "open":
        if gate.escalated:
            blocks.append(
                _section(
                    ":rotating_light: Not decided in time: escalated to "
                    + ", ".join(mention(a) for a in gate.rule.escalate_to)
                )
            )
        if votes:
            blocks.append(_section(f"*Votes so far* ({gate.approvals} of {gate.quorum})\n{votes}"))
        blocks.append(_buttons(notice))
    else:
        icon = ":white_check_mark:" if gate.status == "approved" else ":no_entry:"
        outcome = f"{icon} *{gate.status.capitalize()}* — {escape(gate.closed_reason or gate.status)}"
        blocks.append(_section(outcome + (f"\n{votes}" if votes else "")))
    blocks.append({"type": "context", "elements": [_text(f"<{link}|Open the run in the Temporal UI>")]})
    text = f"{headline} (run {notice.run_id}, stage {notice.stage})"
    return text, blocks


def escalation_reply(notice: GateNotice, mention: Mention) -> str:
    names = ", ".join(mention(a) for a in notice.gate.rule.escalate_to) or "nobody"
    return (
        f":rotating_light: Gate *{escape(notice.gate.rule.gate_id)}* of run `{escape(notice.run_id)}` "
        f"was not decided in time. {names}: it is escalated to you, please decide."
    )


def comment_modal(meta: ModalMetadata, prompt: str) -> Block:
    verb = "Approve" if meta.approve else "Reject"
    intro = f"Gate *{escape(meta.gate)}* of run `{escape(meta.run)}` requires a comment with the vote."
    blocks: list[Block] = [_section(intro)]
    if prompt:
        blocks.append(_section(f"*{escape(prompt)}*"))
    blocks.append(
        {
            "type": "input",
            "block_id": COMMENT_BLOCK,
            "label": {"type": "plain_text", "text": "Comment"},
            "element": {
                "type": "plain_text_input",
                "action_id": COMMENT_INPUT,
                "multiline": True,
                "min_length": 1,
            },
        }
    )
    return {
        "type": "modal",
        "callback_id": VOTE_CALLBACK,
        "private_metadata": meta.model_dump_json(),
        "title": {"type": "plain_text", "text": f"{verb} gate"},
        "submit": {"type": "plain_text", "text": verb},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": blocks,
    }


def run_event_blocks(text: str, *, ui_url: str, namespace: str, run_id: str) -> list[Block]:
    link = run_link(ui_url, namespace, run_id)
    return [
        _section(text),
        {"type": "context", "elements": [_text(f"<{link}|Open the run in the Temporal UI>")]},
    ]
