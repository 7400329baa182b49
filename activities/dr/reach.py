"""`dr.http_check`: can the platform's registries be reached from the worker?

A container registry is reachable when `GET <url>/v2/` answers 200 or 401 (the OCI distribution
spec's API version check: 401 means "there, and wants a token"); any other endpoint when
`GET <url>` answers below 500; a `tls` target when its name resolves and its certificate covers
the name and lasts `cert_min_days` more (`activities/dr/tls.py`). Every target's endpoint must
be in the worker policy's `http.endpoints`, checked for all targets before the first request
(a hostile runbook cannot make the worker probe its own network). Redirects are not followed
and environment proxies are not used, so the request goes where the policy said and nowhere
else. Bodies are not kept.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import Any

from activities.dr.tls import check_tls
from activities.module_activity import module_activity
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.module_args.dr import HTTP_CHECK, HttpCheckArgs, HttpTarget
from pitstop.policy.http import check_http

OCI_API_HEADER = "Docker-Distribution-API-Version"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is the answer


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects())


def _probe_url(target: HttpTarget) -> str:
    if target.kind == "oci_registry":
        return target.url.rstrip("/") + "/v2/"
    return target.url


def _get(url: str, timeout: float) -> tuple[int | None, dict[str, str], str]:
    """(status, headers, why) of one GET; status None when nothing answered."""
    request = urllib.request.Request(url, method="GET", headers={"User-Agent": "pitstop-dr-check"})
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            response.read(4096)
            return int(response.status), dict(response.headers.items()), ""
    except urllib.error.HTTPError as exc:
        return int(exc.code), dict(exc.headers.items()) if exc.headers else {}, ""
    except urllib.error.URLError as exc:
        reason = exc.reason
        return None, {}, str(reason.strerror if isinstance(reason, OSError) and reason.strerror else reason)
    except TimeoutError:
        return None, {}, f"no answer within {timeout:g}s"
    except OSError as exc:
        return None, {}, exc.strerror or str(exc)


def check_target(target: HttpTarget, timeout: float, min_days: int) -> dict[str, Any]:
    url = _probe_url(target)
    started = time.monotonic()
    if target.kind == "tls":
        found = check_tls(url, timeout, min_days)
        elapsed = round((time.monotonic() - started) * 1000)
        return {"name": target.name, "url": target.url, "kind": target.kind, "elapsed_ms": elapsed, **found}
    status, headers, why = _get(url, timeout)
    row: dict[str, Any] = {
        "name": target.name,
        "url": target.url,
        "probe": url,
        "kind": target.kind,
        "status": status,
        "elapsed_ms": round((time.monotonic() - started) * 1000),
    }
    if status is None:
        return {**row, "reachable": False, "why": f"unreachable: {why}"}
    if target.kind == "oci_registry":
        ok = status in (200, 401)
        api = headers.get(OCI_API_HEADER) or headers.get(OCI_API_HEADER.lower())
        detail = f"GET /v2/ answered {status}" + (f" ({OCI_API_HEADER}: {api})" if api else "")
        if 300 <= status < 400:
            detail += f", redirect to {headers.get('Location', '?')} not followed"
        return {
            **row,
            "reachable": ok,
            "why": detail if ok else f"{detail}; an OCI registry answers 200 or 401",
        }
    ok = status < 500
    return {**row, "reachable": ok, "why": f"GET answered {status}"}


@module_activity(HTTP_CHECK)
def http_check(call: ModuleCall, args: HttpCheckArgs) -> ModuleResult:
    configured = [t for t in args.targets if t.url]
    # Every endpoint is judged before the first request is sent.
    for target in configured:
        check_http(target.url, f"{call.module}: {target.name}")
    rows = [
        check_target(t, args.timeout_seconds, args.cert_min_days)
        if t.url
        else {"name": t.name, "url": "", "kind": t.kind, "reachable": None, "why": "not configured"}
        for t in args.targets
    ]
    reachable = [str(r["name"]) for r in rows if r["reachable"] is True]
    unreachable = [str(r["name"]) for r in rows if r["reachable"] is False]
    unconfigured = [str(r["name"]) for r in rows if r["reachable"] is None]
    data = {"targets": rows, "reachable": reachable, "unreachable": unreachable, "unconfigured": unconfigured}
    lines = "; ".join(f"{r['name']}: {'reachable' if r['reachable'] else r['why']}" for r in rows)
    if unreachable and args.fail_on_unreachable:
        fail(ErrorType.PRECONDITION_FAILED, f"unreachable: {', '.join(unreachable)} ({lines})")
    return ModuleResult(msg=lines, data=data)
