"""Builders of the API objects the bridge reads, for the bridge's unit tests."""

from __future__ import annotations

import json
from typing import Any

from bridge import npwg, translate
from podnetwork.ground import constants

NS = "app"
NAD_REF_KIND = "network-attachment-definitions"


def nad(name: str, namespace: str = "nets", config: dict | str | None = None) -> dict[str, Any]:
    if config is None:
        config = {"cniVersion": "1.0.0", "type": "bridge",
                  "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}}
    spec = {} if config == "" else {"config": config if isinstance(config, str) else json.dumps(config)}
    return {"apiVersion": npwg.NAD_API_VERSION, "kind": npwg.NAD_KIND,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def podnetwork(name: str, nads: list[tuple[str, str | None]] | None = None,
               provider: str = constants.BRIDGE_PROVIDER, kind: str = NAD_REF_KIND) -> dict[str, Any]:
    refs = [{"group": npwg.NAD_GROUP, "kind": kind, "name": n, **({"namespace": ns} if ns else {})}
            for ns, n in (nads if nads is not None else [("nets", name)])]
    return {"apiVersion": constants.API_VERSION, "kind": constants.PODNETWORK_KIND,
            "metadata": {"name": name}, "spec": {"enabled": True, "provider": provider, "parametersRefs": refs}}


def attachment(name: str, pn: str, refs: list[dict] | None = None, namespace: str = NS) -> dict[str, Any]:
    spec: dict[str, Any] = {"podNetworkName": pn}
    if refs:
        spec["parametersRefs"] = refs
    return {"apiVersion": constants.API_VERSION, "kind": constants.ATTACHMENT_KIND,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def options(name: str, spec: dict, namespace: str = NS) -> dict[str, Any]:
    return {"apiVersion": translate.OPTIONS_API_VERSION, "kind": translate.OPTIONS_KIND,
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def options_ref(name: str) -> dict[str, str]:
    return {"group": translate.OPTIONS_GROUP, "kind": translate.OPTIONS_PLURAL, "name": name}


def nad_ref(name: str, namespace: str | None = None) -> dict[str, str]:
    return {"group": npwg.NAD_GROUP, "kind": NAD_REF_KIND, "name": name,
            **({"namespace": namespace} if namespace else {})}
