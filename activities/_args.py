"""One way for every module activity to read its arguments: a clear, non-retryable
`InvalidArgs` naming the module and each offending field."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from pitstop.contracts import ModuleCall

A = TypeVar("A", bound=BaseModel)


def parse_args(model: type[A], call: ModuleCall) -> A:
    try:
        return model.model_validate(call.args)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}" for e in exc.errors())
        raise ApplicationError(f"{call.module}: {problems}", type="InvalidArgs", non_retryable=True) from None
