"""API discovery for modules that handle arbitrary kinds within one call (kube.apply,
kube.deprecations): which resource serves a kind, refreshed when a CRD was just applied."""

from __future__ import annotations

from dataclasses import dataclass

from activities.kube.client import ApiStatus, Kube, Obj, api_base, namespaced


@dataclass(frozen=True)
class ApiResource:
    api_version: str
    kind: str
    plural: str
    namespaced: bool
    verbs: tuple[str, ...] = ()

    @property
    def base(self) -> str:
        return api_base(self.api_version)

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """Names checked and encoded (`client.segment`)."""
        return namespaced(self.base, self.plural, namespace if self.namespaced else None, name)

    @property
    def group_resource(self) -> str:
        group = self.api_version.rsplit("/", 1)[0] if "/" in self.api_version else ""
        return f"{self.plural}.{group}" if group else self.plural


class Discovery:
    """Resource lists per group version, fetched once per call (`forget` to refetch)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._lists: dict[str, dict[str, ApiResource] | None] = {}

    def kinds(self, api_version: str) -> dict[str, ApiResource] | None:
        """Kinds served in `api_version` (None when the server does not serve that version)."""
        if api_version not in self._lists:
            base = api_base(api_version)
            try:
                listing: Obj | None = self.kube.get(base)
            except ApiStatus as exc:
                if exc.status != 404:
                    raise
                listing = None
            self._lists[api_version] = (
                None
                if listing is None
                else {
                    str(r.get("kind")): ApiResource(
                        api_version,
                        str(r.get("kind")),
                        str(r.get("name")),
                        bool(r.get("namespaced")),
                        tuple(str(v) for v in r.get("verbs") or []),
                    )
                    for r in listing.get("resources") or []
                    if "/" not in str(r.get("name"))
                }
            )
        return self._lists[api_version]

    def find(self, api_version: str, kind: str) -> ApiResource | None:
        return (self.kinds(api_version) or {}).get(kind)

    def forget(self, api_version: str) -> None:
        self._lists.pop(api_version, None)

    def preferred_versions(self) -> list[str]:
        """`v1` and every group's preferred version: each stored object once."""
        versions = ["v1"]
        groups = self.kube.get("/apis").get("groups") or []
        for group in groups:
            preferred = (group.get("preferredVersion") or {}).get("groupVersion")
            if not preferred and group.get("versions"):
                preferred = group["versions"][0].get("groupVersion")
            if preferred:
                versions.append(str(preferred))
        return versions
