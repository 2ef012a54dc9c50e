"""The demo's store behind the operators' API (`podnetwork.kube.writes.Api`).

The PodNetwork controller and the bridge write through `podnetwork.kube.client.AsyncApi`
on a cluster; in the demo, their one orchestration (`demo.controlplane`) gets this
adapter instead: the same calls, answered by `demo.store.Store`, with the store's
errors as the client's (`NotFound` 404, `Conflict` 409, `ApiError` otherwise), so the
operators' write policy (`podnetwork.kube.writes.write`) sees what it would see on a
cluster.

The store speaks JSON merge patch. A strategic merge patch (what the controller sends
for a node's condition) is applied here for the one list it may carry,
`status.conditions`, merged by `type` as Kubernetes merges it; any other list in a
strategic patch is refused, rather than replaced as a merge patch would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from demo import store as store_mod
from demo.store import Store
from podnetwork.kube import client as kube

_T = TypeVar("_T")

#: Lists a strategic merge patch may carry here, with their merge key.
STRATEGIC_LISTS = {("status", "conditions"): "type"}


class StoreApi:
    """One component's API client over the demo's store (each operator gets its own, as on a
    cluster each has its own client; `on_write` counts its writes)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.on_write: Callable[[str, str, str], None] | None = None
        """Told of every create and patch once it ended: kind, verb, outcome (as `AsyncApi`'s)."""

    async def get(self, resource: kube.Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        what = f"get {kube.kind_of(resource)} {_where(namespace, name)}"
        scope = _scope(resource, namespace)
        return _answer(what, lambda: self.store.get(*_coordinates(resource), name, scope))

    async def list(self, resource: kube.Resource, namespace: str | None = None) -> kube.Listing:
        items = _answer(f"list {kube.plural_of(resource)}",
                        lambda: self.store.list(*_coordinates(resource), _scope(resource, namespace)))
        return kube.Listing(items, self.store.resource_version)

    async def patch(self, resource: kube.Resource, name: str, patch: Any, *, namespace: str | None = None,
                    patch_type: str = "merge", status: bool = False) -> dict[str, Any]:
        what = f"patch {kube.kind_of(resource)} {_where(namespace, name)}{'/status' if status else ''}"
        scope = _scope(resource, namespace)
        coordinates = _coordinates(resource)

        def send() -> dict[str, Any]:
            body = patch
            if patch_type == "strategic":
                body = strategic_as_merge(self.store.get(*coordinates, name, scope), patch)
            elif patch_type != "merge":
                raise store_mod.BadRequest(f"the demo's store does not take {patch_type} patches")
            return self.store.patch(*coordinates, name, body, scope, subresource="status" if status else None)

        return self._written(resource, "patch_status" if status else "patch", what, send)

    async def create(self, resource: kube.Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            meta = store_mod.names_of(body)
        except store_mod.BadRequest:
            meta = store_mod.Names()  # the store refuses the body below, its message saying why
        what = f"create {kube.kind_of(resource)} {_where(meta.namespace, meta.name)}"
        return self._written(resource, "create", what, lambda: self.store.create(body))

    async def delete(self, resource: kube.Resource, name: str, namespace: str | None = None) -> None:
        """Delete (the Services controller deletes the slices it no longer wants); NotFound when gone."""
        what = f"delete {kube.kind_of(resource)} {_where(namespace, name)}"
        scope = _scope(resource, namespace)
        self._written(resource, "delete", what,
                      lambda: self.store.delete(*_coordinates(resource), name, scope) or {})

    async def close(self) -> None:
        return None

    def _written(self, resource: kube.Resource, verb: str, what: str,
                 send: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        outcome = "failed"
        try:
            result = _answer(what, send)
            outcome = "written"
            return result
        except kube.NotFound:
            outcome = "not_found"
            raise
        except kube.Conflict:
            outcome = "conflict"
            raise
        finally:
            if self.on_write is not None:
                self.on_write(kube.kind_of(resource), verb, outcome)


def strategic_as_merge(current: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A strategic merge patch of `current` as the merge patch that does the same.

    Each list of `STRATEGIC_LISTS` in the patch is merged into the object's by its key
    (an item of the patch replaces the item of the same key, the others stay, in place);
    the result is sent whole, as a merge patch replaces lists. Raises `store.BadRequest`
    for a list elsewhere, whose merge the demo does not know.
    """
    merged = dict(patch)
    _refuse_unknown_lists(patch, ())
    for path, key in STRATEGIC_LISTS.items():
        items = _at(patch, path)
        if items is None:
            continue
        have = [dict(item) for item in (_at(current, path) or [])]
        for item in items:
            at = next((i for i, old in enumerate(have) if old.get(key) == item.get(key)), None)
            if at is None:
                have.append(dict(item))
            else:
                have[at] = dict(item)
        merged = _put(merged, path, have)
    return merged


def _refuse_unknown_lists(value: Any, path: tuple[str, ...]) -> None:
    if isinstance(value, list) and path not in STRATEGIC_LISTS:
        raise store_mod.BadRequest(f"the demo's store merges no list at {'.'.join(path)} strategically")
    if isinstance(value, Mapping):
        for name, inner in value.items():
            _refuse_unknown_lists(inner, (*path, name))


def _at(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for name in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(name)  # type: ignore[assignment]
    return obj


def _put(obj: Mapping[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = dict(obj)
    head, *rest = path
    out[head] = _put(out.get(head) or {}, tuple(rest), value) if rest else value  # a JSON path, any kind
    return out


def _coordinates(resource: kube.Resource) -> tuple[str, str]:
    return kube.api_version_of(resource), kube.kind_of(resource)


def _scope(resource: kube.Resource, namespace: str | None) -> str | None:
    return namespace or None if kube.namespaced(resource) else None


def _where(namespace: str | None, name: str | None) -> str:
    return f"{namespace}/{name}" if namespace else str(name)


def _answer(what: str, call: Callable[[], _T]) -> _T:
    """`call()`, with the store's errors as the operators' client raises them."""
    try:
        return call()
    except store_mod.NotFound as exc:
        raise kube.NotFound(what, 404, exc.message, reason=exc.reason) from None
    except (store_mod.Conflict, store_mod.AlreadyExists) as exc:
        raise kube.Conflict(what, 409, exc.message, reason=exc.reason) from None
    except store_mod.ApiError as exc:
        raise kube.ApiError(what, exc.code, exc.message, reason=exc.reason) from None


__all__ = ["STRATEGIC_LISTS", "StoreApi", "strategic_as_merge"]
