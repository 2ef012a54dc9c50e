"""What the agent keeps of the cluster for the Services' ClusterIPs in its pods, and only that. No I/O.

`ServiceState` is a `watchcache.Listener` of three kinds, each listed and watched cluster-wide:

- **Services** carrying the label `service.kubernetes.io/service-proxy-name:
  podnetwork.multinetwork.x-k8s.io` (the list and the watch ask the API server for those only,
  `watchcache.SERVICE`); of those, the ones annotated `multinetwork.x-k8s.io/podnetwork`, of type
  ClusterIP with a ClusterIP, kept as `bridge.services.Service` (`views.service`). A headless
  Service gets no rule in a pod, so it is not kept either.
- **EndpointSlices** managed by the bridge (`endpointslice.kubernetes.io/managed-by:
  endpointslice-controller.multinetwork.x-k8s.io`, `watchcache.ENDPOINTSLICE`; another
  manager's slice is never kept, even if the server did not filter), kept as their endpoints
  (`views.slice_endpoints`), grouped by Service.
- **PodNetworks**, as their name and, for the NPWG bridge's, their NAD: the agent's records
  name a pod's networks by NAD, a Service by PodNetwork (`by_nad`). The watch cache's PodNetwork
  watch when there is one (`watchcache.Mirror.listeners`).

`ready` is true once each kind has been listed (or found missing: a 404). `version` grows with
every change that can change a pod's rules, and `on_change` is called then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from bridge import translate
from bridge.agent.kube.watchcache import ENDPOINTSLICE, PODNETWORK, SERVICE, KeptKinds, Kind
from bridge.policy import views as policy_views
from bridge.services import Endpoint, Service, views
from podnetwork.ground import constants

log = logging.getLogger(__name__)

KINDS = (SERVICE, ENDPOINTSLICE, PODNETWORK)
"""What the ClusterIPs read, each listed and watched cluster-wide."""


def _key(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        return None
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if isinstance(namespace, str) else meta["name"]


class ServiceState(KeptKinds):
    """The Services on PodNetworks, their endpoints and the networks' NADs (module docstring)."""

    kinds = KINDS
    label = "services"
    log = log

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        super().__init__(on_change)
        self.services: dict[str, Service] = {}
        """By `namespace/name`: the Services served on a PodNetwork that have a ClusterIP."""
        self.slices: dict[str, tuple[str, tuple[Endpoint, ...]]] = {}
        """Our EndpointSlices by `namespace/name`: (their Service's key, their endpoints)."""
        self.by_service: dict[str, dict[str, tuple[Endpoint, ...]]] = {}
        """Service key -> its slices' endpoints, by slice key (`endpoints` joins them)."""
        self.nads: dict[str, str] = {}
        """A PodNetwork's name -> the NAD (`namespace/name`) the NPWG bridge attaches it with."""

    # --- keeping ---------------------------------------------------------------------------------

    def _clear(self, kind: Kind) -> bool:
        """Forgets every object of `kind`; whether there was any."""
        if kind is SERVICE:
            had = bool(self.services)
            self.services.clear()
        elif kind is ENDPOINTSLICE:
            had = bool(self.slices)
            self.slices.clear()
            self.by_service.clear()
        else:
            had = bool(self.nads)
            self.nads.clear()
        return had

    def _put(self, kind: Kind, obj: dict[str, Any]) -> bool:
        key = _key(obj)
        if key is None:
            return False
        if kind is SERVICE:
            return self._put_service(key, obj)
        if kind is ENDPOINTSLICE:
            return self._put_slice(key, obj)
        return self._put_podnetwork(key, obj)

    def _delete(self, kind: Kind, obj: dict[str, Any]) -> bool:
        key = _key(obj)
        if key is None:
            return False
        if kind is SERVICE:
            return self.services.pop(key, None) is not None
        if kind is ENDPOINTSLICE:
            return self._drop_slice(key)
        return self.nads.pop(key, None) is not None

    def _put_service(self, key: str, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        proxied = isinstance(labels, Mapping) and \
            labels.get(constants.SERVICE_PROXY_NAME_LABEL) == constants.SERVICE_PROXY_NAME
        # Without the label kube-proxy programs the ClusterIP on the node: two proxies must not.
        found = views.service(obj) if proxied else None
        if found is None or found.headless:
            return self.services.pop(key, None) is not None
        if self.services.get(key) == found:
            return False
        self.services[key] = found
        return True

    def _put_slice(self, key: str, obj: dict[str, Any]) -> bool:
        found = views.slice_endpoints(obj, constants.ENDPOINTSLICE_MANAGED_BY)
        if found is None:
            return self._drop_slice(key)
        service, endpoints = found
        if self.slices.get(key) == found:
            return False
        self._drop_slice(key)
        self.slices[key] = found
        self.by_service.setdefault(service, {})[key] = endpoints
        return True

    def _drop_slice(self, key: str) -> bool:
        had = self.slices.pop(key, None)
        if had is None:
            return False
        of_service = self.by_service.get(had[0], {})
        of_service.pop(key, None)
        if not of_service:
            self.by_service.pop(had[0], None)
        return True

    def _put_podnetwork(self, name: str, obj: dict[str, Any]) -> bool:
        try:
            nad = policy_views.network_of(translate.PodNetwork.model_validate(obj)).nad
        except (ValidationError, ValueError) as exc:
            log.warning("services: PodNetwork %s does not fit its schema (%s); a Service naming it is served "
                        "in no pod until it is fixed", name, str(exc)[:300])
            return self.nads.pop(name, None) is not None
        if nad is None:
            return self.nads.pop(name, None) is not None
        if self.nads.get(name) == nad:
            return False
        self.nads[name] = nad
        return True

    # --- what decisions read ---------------------------------------------------------------------

    def by_nad(self) -> dict[str, str]:
        """A NAD's `namespace/name` -> the PodNetwork it backs (the key a Service names)."""
        return {nad: name for name, nad in self.nads.items()}

    def endpoints(self) -> dict[str, tuple[Endpoint, ...]]:
        """Every Service's endpoints, from all its slices (what `dnat.compile_pod` takes)."""
        return {service: tuple(e for endpoints in slices.values() for e in endpoints)
                for service, slices in self.by_service.items() if service in self.services}


__all__ = ["KINDS", "ServiceState"]
