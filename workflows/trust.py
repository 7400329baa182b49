"""Signing and checking from workflow code: every message between a run and its host
workflows, each host's input and a run's continue-as-new state carry an HMAC made with the
worker key, which only workers hold (`pitstop.keys`).

Temporal tells a workflow nothing about who sent a Signal or started it, and anyone with
access to the namespace can signal any workflow or start one with any input. So a message
counts only when its signature covers: the signal's name, the message's content, the sender
and receiver workflow ids and the receiving execution's run id. A message from a client, or
one taken from history and sent again to another host, run or execution, does not verify.

The key stays in the worker: workflow code reduces what is signed to a digest (pure, in
`pitstop.signing`) and asks local activities (`activities/trust.py`) to sign or check it.
Each costs one local activity (a few milliseconds), and only for messages, not per task.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from workflows.handles import Signal, signal_name

with workflow.unsafe.imports_passed_through():
    from pitstop.approvals import RequesterProof, VoteProof
    from pitstop.signing import digest, model_digest
    from pitstop.trust import ProofVerdict, SignRequest, VerifyRequest, WorkerPurpose, message_value

M = TypeVar("M", bound=BaseModel)

_TIMEOUT = timedelta(seconds=10)
_RETRY = RetryPolicy(maximum_attempts=3, non_retryable_error_types=["Unauthorized"])


def normalized(model: M) -> M:
    """The model as the receiver will see it (after the data converter's JSON round trip), so
    that a digest taken here is the digest the receiver takes."""
    return type(model).model_validate_json(model.model_dump_json())


def body(message: BaseModel) -> str:
    """Digest of a message's content, without its signature."""
    return digest(message.model_dump(mode="json", exclude={"signature"}))


async def _sign(purpose: WorkerPurpose, values: list[dict[str, Any]]) -> list[str]:
    if not values:
        return []
    signatures: list[str] = await workflow.execute_local_activity(
        "trust.sign",
        SignRequest(purpose=purpose, values=values),
        result_type=list[str],
        start_to_close_timeout=_TIMEOUT,
        retry_policy=_RETRY,
    )
    return signatures


async def _valid(purpose: WorkerPurpose, value: dict[str, Any], signature: str) -> bool:
    if not signature:
        return False
    try:
        ok: bool = await workflow.execute_local_activity(
            "trust.verify",
            VerifyRequest(purpose=purpose, value=value, signature=signature),
            result_type=bool,
            start_to_close_timeout=_TIMEOUT,
            retry_policy=_RETRY,
        )
    except ActivityError as err:
        workflow.logger.warning("could not check a %s signature: %s", purpose, err.cause or err)
        return False
    return ok


# --- messages ------------------------------------------------------------------------------
async def sign_messages(signal: Signal, to: list[tuple[M, str, str]]) -> list[M]:
    """Sign messages for `signal` (its handler method) from this workflow, each for
    (receiver workflow id, its run id)."""
    me = workflow.info().workflow_id
    kind = signal_name(signal)
    values = [message_value(kind, body(m), me, receiver, run) for m, receiver, run in to]
    signatures = await _sign("message", values)
    return [m.model_copy(update={"signature": s}) for (m, _, _), s in zip(to, signatures, strict=True)]


async def sign_message(signal: Signal, message: M, receiver: str, receiver_run: str) -> M:
    [signed] = await sign_messages(signal, [(message, receiver, receiver_run)])
    return signed


async def verify_message(signal: Signal, message: BaseModel, sender: str) -> bool:
    """Whether `message` was signed by `sender` for this very execution, for `signal`."""
    info = workflow.info()
    signature = str(getattr(message, "signature", "") or "")
    value = message_value(signal_name(signal), body(message), sender, info.workflow_id, info.run_id)
    return await _valid("message", value, signature)


# --- host inputs ----------------------------------------------------------------------------
def _host_input_value(inp: BaseModel, child: str, parent: str, parent_run: str) -> dict[str, Any]:
    return {"child": child, "parent": parent, "parent_run": parent_run, "input": body(inp)}


async def sign_host_inputs(inputs: list[tuple[M, str]]) -> list[M]:
    """Sign (input, child workflow id) pairs from this run's current execution."""
    info = workflow.info()
    values = [_host_input_value(inp, child, info.workflow_id, info.run_id) for inp, child in inputs]
    signatures = await _sign("host-input", values)
    return [inp.model_copy(update={"signature": s}) for (inp, _), s in zip(inputs, signatures, strict=True)]


async def verify_host_input(inp: BaseModel) -> bool:
    """Whether this host workflow's input was signed by its parent, for it."""
    info = workflow.info()
    if info.parent is None:
        return False
    value = _host_input_value(inp, info.workflow_id, info.parent.workflow_id, info.parent.run_id)
    return await _valid("host-input", value, str(getattr(inp, "signature", "") or ""))


# --- continue-as-new state ------------------------------------------------------------------
# The carried state holds every finished host's result and the plan: at 10,000 hosts it is
# ~14 MB, and a canonical Python JSON of it took 0.6 s, three times in one activation (the two
# checks that nothing changed while it was signed, and the signature) - past Temporal's
# deadlock detector, which fails an activation that does not yield within 2 s. So the state is
# digested as pydantic's own (Rust) JSON of the model: 0.1 s at that size. The receiver takes
# the same digest of the model the data converter gave it, which is the same bytes because a
# model's JSON survives the converter's JSON round trip unchanged (`normalized` is that round
# trip; a state that did not would be refused, loudly, not accepted). Signatures made this way
# carry STATE_SCHEME; one without it comes from an execution that continued as new before this
# change, and is checked the old way.
STATE_SCHEME = "json1:"


def state_digest(state: BaseModel) -> str:
    """SHA-256 of the model's JSON as pydantic writes it."""
    return model_digest(state)


def _state_value(workflow_id: str, from_run: str, state_hash: str) -> dict[str, Any]:
    return {"workflow": workflow_id, "from_run": from_run, "state": state_hash}


async def sign_state(state_hash: str) -> str:
    """This execution's signature of the state (by its `state_digest`) it continues with."""
    info = workflow.info()
    [signature] = await _sign("state", [_state_value(info.workflow_id, info.run_id, state_hash)])
    return STATE_SCHEME + signature


async def verify_state(state: BaseModel, signature: str) -> bool:
    """Whether `state` was signed by the execution this one continues."""
    info = workflow.info()
    if info.continued_run_id is None:
        return False
    if signature.startswith(STATE_SCHEME):
        signature, state_hash = signature.removeprefix(STATE_SCHEME), state_digest(state)
    else:
        state_hash = digest(state.model_dump(mode="json"))
    return await _valid("state", _state_value(info.workflow_id, info.continued_run_id, state_hash), signature)


# --- votes and requesters (vote key) --------------------------------------------------------
async def check_vote(proof: VoteProof) -> ProofVerdict:
    return await _check_proof("trust.verify_vote", proof)


async def check_requester(proof: RequesterProof) -> ProofVerdict:
    return await _check_proof("trust.verify_requester", proof)


async def _check_proof(activity: str, proof: BaseModel) -> ProofVerdict:
    try:
        verdict: ProofVerdict = await workflow.execute_local_activity(
            activity,
            proof,
            result_type=ProofVerdict,
            start_to_close_timeout=_TIMEOUT,
            retry_policy=_RETRY,
        )
    except ActivityError as err:
        return ProofVerdict(valid=False, reason=f"its signature could not be checked ({err.cause or err})")
    return verdict


__all__ = [
    "body",
    "check_requester",
    "check_vote",
    "normalized",
    "sign_host_inputs",
    "sign_message",
    "sign_messages",
    "sign_state",
    "state_digest",
    "verify_host_input",
    "verify_message",
    "verify_state",
]
