"""HTTP front end (aiohttp): Kubernetes API paths onto `KubeApi`, discovery, watch streams,
server-side tables, pod logs, and the `/_sim/` admin endpoints.

Paths follow the apiserver's grammar:
  /api/v1/[namespaces/{ns}/]{resource}[/{name}[/{subresource}]]
  /apis/{group}/{version}/[namespaces/{ns}/]{resource}[/{name}[/{subresource}]]
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from ruamel.yaml.error import YAMLError

from pitstop.kube.objects import is_terminating, meta, pod_is_finished
from pitstop.safe_yaml import safe_load
from pitstop_sim import openapi, ssa, tables
from pitstop_sim.access import AccessControl
from pitstop_sim.admin import AdminRoutes
from pitstop_sim.api import APPLY_PATCH, KubeApi
from pitstop_sim.context import SimContext
from pitstop_sim.errors import ApiError, bad_request, method_not_allowed, not_found_path, unauthorized
from pitstop_sim.faults import RequestInfo
from pitstop_sim.metrics.routes import SCRAPE_PREFIX, scrape
from pitstop_sim.resources import ResourceType, version_info
from pitstop_sim.selectors import parse_field_selector, parse_label_selector
from pitstop_sim.store import encode
from pitstop_sim.watch import WatchHub, WatchRequest

log = logging.getLogger(__name__)
Obj = dict[str, Any]

PUBLIC_PATHS = ("/version", "/healthz", "/livez", "/readyz")
WATCH_TIMEOUT_DEFAULT = 1800.0


@dataclass
class ResourcePath:
    group: str
    version: str
    namespace: str | None
    plural: str | None
    name: str | None
    subresource: str | None
    legacy_watch: bool = False


def parse_path(path: str) -> ResourcePath | None:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    legacy_watch = bool(rest) and rest[0] == "watch"
    if legacy_watch:
        rest = rest[1:]
    if not rest:
        return ResourcePath(group, version, None, None, None, None)
    if rest[0] == "namespaces" and len(rest) >= 3 and not (group == "" and rest[2] in ("status", "finalize")):
        namespace, rest = rest[1], rest[2:]
    else:
        namespace = None
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if len(rest) > 3:
        return None
    return ResourcePath(group, version, namespace, plural, name, sub, legacy_watch)


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=encode(body) if not isinstance(body, bytes) else body,
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _error(exc: ApiError) -> web.Response:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    return _json(exc.status(), exc.code, headers)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "true")


def _int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise bad_request(f"invalid value for {name}: {raw!r} is not an integer") from None


def _wants_table(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return "as=Table" in accept


def _dry_run(request: web.Request) -> bool:
    values = request.query.getall("dryRun", [])
    for value in values:
        if value != "All":
            raise bad_request(f'Invalid dryRun value "{value}": supported values: "All"')
    return bool(values)


def _field_manager(request: web.Request) -> str:
    """The `fieldManager` a client names, else its user agent's first word (as the apiserver)."""
    named = request.query.get("fieldManager")
    if named is not None:
        if not named or len(named) > 128:
            raise bad_request(f"Invalid fieldManager {named!r}: must be 1 to 128 characters")
        return named
    return ssa.default_manager(request.headers.get("User-Agent", ""))


def _force(request: web.Request) -> bool:
    value = request.query.get("force", "false")
    if value not in ("true", "false", "1", "0", "True", "False"):
        raise bad_request(f'Invalid force value "{value}"')
    return value in ("true", "1", "True")


class HttpFrontend:
    def __init__(
        self,
        ctx: SimContext,
        api: KubeApi,
        admin: AdminRoutes,
        token: str,
        *,
        require_token: bool,
        access: AccessControl | None = None,
    ) -> None:
        self.ctx = ctx
        self.access = access
        self.api = api
        self.admin = admin
        self.token = token
        self.require_token = require_token
        self.server_address = "127.0.0.1:0"
        self.watches = WatchHub(ctx.store)

    @property
    def closing(self) -> asyncio.Event:
        return self.watches.closing

    def close(self) -> None:
        """End open watches and log streams (the server is stopping)."""
        self.watches.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path.startswith("/_sim/") or path == "/_sim":
            return await self.admin.handle(request)
        # The exporters' scrape endpoints: no token, as Prometheus scrapes them on loopback.
        if (path == SCRAPE_PREFIX or path.startswith(SCRAPE_PREFIX + "/")) and request.method == "GET":
            return scrape(self.ctx, path)
        try:
            if self.access is not None:
                self.access.check(request.method, path, request.query, request.headers.get("Authorization"))
            else:
                self._authenticate(request, path)
            return await self._route(request, path)
        except ApiError as exc:
            return _error(exc)
        except ConnectionResetError:  # the client went away mid-stream (a watch it stopped)
            raise
        except Exception as exc:  # answer like the apiserver would, and keep serving
            log.exception("internal error serving %s %s", request.method, path)
            return _error(ApiError(500, "InternalError", f"Internal error occurred: {exc}"))

    def _authenticate(self, request: web.Request, path: str) -> None:
        """A wrong bearer token is refused (401). kubectl sends no token to a plain-HTTP server, so
        anonymous requests are served unless the cluster was started with `require_token`."""
        header = request.headers.get("Authorization")
        if header is not None:
            if header != f"Bearer {self.token}":
                raise unauthorized()
        elif self.require_token and path not in PUBLIC_PATHS:
            raise unauthorized()

    async def _route(self, request: web.Request, path: str) -> web.StreamResponse:
        registry = self.ctx.registry
        stripped = path.rstrip("/") or "/"
        if stripped == "/version":
            return _json(version_info(self.ctx.kubernetes_version))
        if stripped in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok", content_type="text/plain")
        if stripped == "/api":
            return _json(registry.api_versions(self.server_address))
        if stripped == "/apis":
            return _json(registry.api_group_list())
        if stripped == "/openapi/v3":
            return _json(openapi.root(registry))
        if stripped.startswith("/openapi/v3/"):
            rest = stripped.removeprefix("/openapi/v3/").split("/")
            doc = None
            if len(rest) == 2 and rest[0] == "api":
                doc = openapi.group_version(registry, "", rest[1])
            elif len(rest) == 3 and rest[0] == "apis":
                doc = openapi.group_version(registry, rest[1], rest[2])
            if doc is None:
                raise not_found_path()
            return _json(doc)
        parts = [p for p in stripped.split("/") if p]
        if len(parts) == 2 and parts[0] == "apis":
            group = registry.api_group(parts[1])
            if group is None:
                raise not_found_path()
            return _json({"kind": "APIGroup", "apiVersion": "v1", **group})
        parsed = parse_path(stripped)
        if parsed is None:
            raise not_found_path()
        if parsed.plural is None:
            resources = registry.resource_list(parsed.group, parsed.version)
            if resources is None:
                raise not_found_path()
            return _json(resources)
        rt = registry.get(parsed.group, parsed.version, parsed.plural)
        if rt is None:
            raise not_found_path()
        if parsed.namespace is not None and not rt.namespaced:
            raise not_found_path()
        if parsed.subresource is not None and rt.subresource(parsed.subresource) is None:
            raise not_found_path()
        verb = self._verb(request, parsed)
        info = RequestInfo(verb, rt.plural, parsed.subresource, parsed.namespace, parsed.name)
        self.ctx.recorder.request(info.label())
        delay = self.ctx.faults.delay_seconds(info)
        if delay > 0:
            await asyncio.sleep(delay)
        fault = self.ctx.faults.error_for(info)
        if fault is not None:
            raise fault
        return await self._serve(request, rt, parsed, verb)

    def _verb(self, request: web.Request, parsed: ResourcePath) -> str:
        method = request.method
        if method == "GET":
            if parsed.legacy_watch or _flag(request, "watch"):
                return "watch"
            return "get" if parsed.name else "list"
        if method == "POST":
            return "create"
        if method == "PUT":
            return "update"
        if method == "PATCH":
            return "patch"
        if method == "DELETE":
            return "delete" if parsed.name else "deletecollection"
        raise method_not_allowed()

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        content_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
        if "protobuf" in content_type or "cbor" in content_type:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format: {content_type}",
            )
        try:
            if "yaml" in content_type:
                return safe_load(raw.decode())
            return json.loads(raw)
        except (json.JSONDecodeError, YAMLError, UnicodeDecodeError) as exc:
            raise bad_request(f"error decoding request body: {exc}") from None

    async def _serve(
        self, request: web.Request, rt: ResourceType, p: ResourcePath, verb: str
    ) -> web.StreamResponse:
        api = self.api
        ns = p.namespace
        sub = p.subresource
        if verb == "watch":
            return await self._watch(request, rt, p)
        if verb == "list":
            return self._list(request, rt, ns)
        if verb == "get":
            return await self._get(request, rt, p)
        dry_run = _dry_run(request)
        if verb == "create":
            body = await self._body(request)
            if p.name is None:
                return _json(api.create(rt, ns, body, dry_run=dry_run, manager=_field_manager(request)), 201)
            if sub == "eviction" and rt.kind == "Pod":
                return _json(api.evict(ns or "default", p.name, body, dry_run=dry_run), 201)
            if sub == "binding" and rt.kind == "Pod":
                return _json(api.bind(ns or "default", p.name, body), 201)
            raise method_not_allowed()
        if verb == "update":
            assert p.name is not None
            body = await self._body(request)
            if sub == "scale":
                return _json(
                    api.update_scale(
                        rt,
                        ns or "default",
                        p.name,
                        body or {},
                        dry_run=dry_run,
                        manager=_field_manager(request),
                    )
                )
            if sub not in (None, "status", "finalize"):
                raise method_not_allowed()
            return _json(
                api.update(
                    rt,
                    ns,
                    p.name,
                    body,
                    subresource="status" if sub == "status" else None,
                    dry_run=dry_run,
                    manager=_field_manager(request),
                )
            )
        if verb == "patch":
            assert p.name is not None
            raw = await request.read()
            content_type = request.headers.get("Content-Type", "")
            if sub == "scale":
                return _json(
                    api.patch_scale(
                        rt,
                        ns or "default",
                        p.name,
                        content_type,
                        raw,
                        dry_run=dry_run,
                        manager=_field_manager(request),
                    )
                )
            if sub not in (None, "status"):
                raise method_not_allowed()
            manager = _field_manager(request)
            if content_type.split(";")[0].strip().lower() == APPLY_PATCH and sub is None:
                # Apply names its manager: no user-agent default here.
                named = request.query.get("fieldManager") and manager
                applied, created = api.apply(
                    rt, ns, p.name, raw, manager=named or None, force=_force(request), dry_run=dry_run
                )
                return _json(applied, 201 if created else 200)
            return _json(
                api.patch(
                    rt, ns, p.name, content_type, raw, subresource=sub, dry_run=dry_run, manager=manager
                )
            )
        if verb == "delete":
            assert p.name is not None
            options = await self._delete_options(request)
            return _json(api.delete(rt, ns, p.name, options, dry_run=dry_run))
        if verb == "deletecollection":
            return await self._delete_collection(request, rt, ns, dry_run)
        raise method_not_allowed()

    async def _get(self, request: web.Request, rt: ResourceType, p: ResourcePath) -> web.StreamResponse:
        assert p.name is not None
        ns = p.namespace
        if p.subresource == "log":
            return await self._log(request, ns or "default", p.name)
        if p.subresource == "scale":
            return _json(self.api.get_scale(rt, ns or "default", p.name))
        obj = self.api.get(rt, ns, p.name)
        if _wants_table(request):
            return _json(
                tables.table(
                    rt,
                    [obj],
                    include_object=request.query.get("includeObject", "Metadata"),
                    list_meta={"resourceVersion": meta(obj).get("resourceVersion", "")},
                )
            )
        return _json(obj)

    async def _delete_collection(
        self, request: web.Request, rt: ResourceType, ns: str | None, dry_run: bool
    ) -> web.StreamResponse:
        options = await self._delete_options(request)
        items = self.api.delete_collection(
            rt,
            ns,
            label_selector=request.query.get("labelSelector"),
            field_selector=request.query.get("fieldSelector"),
            options=options,
            dry_run=dry_run,
        )
        return _json(
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self.ctx.store.resource_version)},
                "items": items,
            }
        )

    async def _delete_options(self, request: web.Request) -> Obj:
        body = await self._body(request)
        options: Obj = dict(body) if isinstance(body, dict) else {}
        grace = _int(request, "gracePeriodSeconds")
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if "propagationPolicy" in request.query:
            options["propagationPolicy"] = request.query["propagationPolicy"]
        return options

    def _list(self, request: web.Request, rt: ResourceType, ns: str | None) -> web.Response:
        page = self.api.list(
            rt,
            ns,
            label_selector=request.query.get("labelSelector"),
            field_selector=request.query.get("fieldSelector"),
            limit=_int(request, "limit"),
            continue_token=request.query.get("continue") or None,
        )
        result = page.result
        list_meta: Obj = {"resourceVersion": str(result.resource_version)}
        if page.continue_token:
            list_meta["continue"] = page.continue_token
            list_meta["remainingItemCount"] = result.remaining
        if _wants_table(request):
            body = tables.table(
                rt,
                result.items,
                include_object=request.query.get("includeObject", "Metadata"),
                list_meta=list_meta,
            )
            return _json(body)
        head = json.dumps(
            {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": list_meta}, separators=(",", ":")
        )
        items = b",".join(
            self.ctx.store.encoded(key, obj) for key, obj in zip(result.keys, result.items, strict=True)
        )
        return _json(head[:-1].encode() + b',"items":[' + items + b"]}")

    # --- watch ----------------------------------------------------------------------------------

    async def _watch(self, request: web.Request, rt: ResourceType, p: ResourcePath) -> web.StreamResponse:
        fields = parse_field_selector(request.query.get("fieldSelector"), rt)
        if p.name:
            fields = [*fields, *parse_field_selector(f"metadata.name={p.name}", rt)]
        watch = WatchRequest(
            rt=rt,
            namespace=p.namespace if rt.namespaced else None,
            labels=parse_label_selector(request.query.get("labelSelector")),
            fields=fields,
            resource_version=request.query.get("resourceVersion", ""),
            timeout=float(_int(request, "timeoutSeconds") or WATCH_TIMEOUT_DEFAULT),
            bookmarks=_flag(request, "allowWatchBookmarks"),
            send_initial_events=_flag(request, "sendInitialEvents"),
            as_table=_wants_table(request),
            include_object=request.query.get("includeObject", "Metadata"),
        )
        return await self.watches.serve(request, watch)

    # --- logs -----------------------------------------------------------------------------------

    async def _log(self, request: web.Request, ns: str, name: str) -> web.StreamResponse:
        kwargs: dict[str, Any] = {
            "container": request.query.get("container") or None,
            "tail_lines": _int(request, "tailLines"),
            "limit_bytes": _int(request, "limitBytes"),
            "timestamps": _flag(request, "timestamps"),
            "previous": _flag(request, "previous"),
        }
        text = self.api.pod_log(ns, name, **kwargs)
        if not _flag(request, "follow"):
            return web.Response(text=text, content_type="text/plain")
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(text.encode())
        sent = len(self.api.pod_log(ns, name, container=kwargs["container"]))
        pods = self.ctx.rt("", "pods")
        while not self.closing.is_set():
            await asyncio.sleep(0.1)
            pod = self.ctx.store.get(pods.storage, ns, name)
            if pod is None:
                break
            full = self.api.pod_log(ns, name, container=kwargs["container"])
            if len(full) > sent:
                await response.write(full[sent:].encode())
                sent = len(full)
            if pod_is_finished(pod) or is_terminating(pod):
                break
        await response.write_eof()
        return response
