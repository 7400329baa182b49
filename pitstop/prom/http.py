"""The one GET a `prom.*` module sends: to the URL the policy allowed, and nowhere else.

Redirects are not followed and environment proxies are not used (`trust_env=False`), so the
request goes to the endpoint the worker policy checked. The body is read up to `MAX_BODY`: a
query that matches half the fleet's series should be narrowed, not carried into history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import httpx

MAX_BODY = 16 * 1024 * 1024
USER_AGENT = "pitstop-prom"


class PromUnreachable(Exception):
    """Nothing answered (refused, DNS, TLS, timeout); the message says which."""


class BodyTooLarge(Exception):
    pass


@dataclass(frozen=True)
class Answer:
    status_code: int
    body: bytes
    location: str | None


def get(
    url: str,
    params: Mapping[str, str],
    *,
    token: str | None,
    timeout: float,
    verify: bool = True,
) -> Answer:
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token.strip()}"
    try:
        with (
            httpx.Client(trust_env=False, follow_redirects=False, timeout=timeout, verify=verify) as client,
            client.stream("GET", url, params=dict(params), headers=headers) as response,
        ):
            body = bytearray()
            for chunk in response.iter_bytes():
                body.extend(chunk)
                if len(body) > MAX_BODY:
                    raise BodyTooLarge(f"the answer is over {MAX_BODY // (1024 * 1024)} MiB")
            return Answer(response.status_code, bytes(body), response.headers.get("location"))
    except httpx.TimeoutException:
        raise PromUnreachable(f"no answer within {timeout:g}s") from None
    except httpx.HTTPError as exc:
        raise PromUnreachable(str(exc) or type(exc).__name__) from None
