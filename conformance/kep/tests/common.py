"""Steps the tests share: make objects from the manifests, wait for conditions, read pods."""

from __future__ import annotations

import json
from typing import Any

from conformance.kep import client as kc
from conformance.kep import views
from conformance.kep.suite import Context
from podnetwork.ground import constants
from podnetwork.kube import client as kube

READY = constants.ConditionType.READY.value
PARAMS_READY = constants.ConditionType.PARAMS_READY.value
NETWORKS = constants.NETWORKS_ANNOTATION


async def podnetwork(ctx: Context, base: str, manifest: str = "podnetwork.yaml", **values: str) -> str:
    name = ctx.name(base)
    await ctx.apply(manifest, NAME=name, **values)
    return name


async def attachment(ctx: Context, name: str, network: str) -> str:
    await ctx.apply("attachment.yaml", NAME=name, NETWORK=network)
    return name


async def pod(ctx: Context, name: str, networks: list[dict[str, Any]] | None) -> dict[str, Any]:
    if networks is None:
        (made,) = await ctx.apply("pod-no-networks.yaml", NAME=name)
    else:
        (made,) = await ctx.apply("pod.yaml", NAME=name, NETWORKS=json.dumps(networks))
    return made


async def wait_condition(ctx: Context, resource: kc.Resource, name: str, type_: str, status: str,
                         reason: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    """Wait until the object's condition `type_` has `status` (and `reason`); returns the condition."""
    kind = kube.kind_of(resource)
    want = f"{type_}={status}" + (f" reason {reason}" if reason else "")

    async def check() -> dict[str, Any] | None:
        obj = await ctx.client.get(resource, name, namespace)
        if obj is None:
            raise kc.Unmet(f"{kind} {name} does not exist")
        cond = kc.condition(obj, type_)
        if cond is None:
            raise kc.Unmet(f"no {type_} condition; status is {kc.shown(obj.get('status'))}")
        if cond.get("status") != status or (reason is not None and cond.get("reason") != reason):
            raise kc.Unmet(f"{type_} is {kc.shown(cond)}")
        return cond

    return await ctx.client.eventually(f"{kind} {name} gets {want}", check)


async def pod_networks(ctx: Context, name: str) -> Any:
    """The stored pod's networks list (the annotation parsed), or None when it has none."""
    obj = await ctx.client.get(kc.Pod, name, ctx.namespace)
    assert obj is not None, f"pod {ctx.namespace}/{name} was not stored"
    raw = views.read(obj).metadata.annotation(NETWORKS)
    return None if raw is None else json.loads(raw)


def finalizers(obj: dict[str, Any] | None) -> list[str]:
    return list(views.read(obj).metadata.finalizers or [])


def deleting(obj: dict[str, Any] | None) -> bool:
    return bool(views.read(obj).metadata.deletion_timestamp)


async def refused(ctx: Context, what: str, create: Any) -> kc.ApiError:
    """`await create()` must be refused with a 4xx (not 404, not 409); the error is returned."""
    try:
        await create()
    except kc.ApiError as exc:
        if 400 <= exc.status < 500 and exc.status not in (404, 409):
            return exc
        raise AssertionError(f"{what}: expected a refusal (4xx), got {exc}") from None
    raise AssertionError(f"{what}: was accepted")
