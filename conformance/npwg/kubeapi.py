"""A small Kubernetes API on 127.0.0.1: what a delegating plugin needs from the cluster, and no more.

Served over real HTTP (the standard library's threading server), so any client
works: this project's lightkube, client-go in Multus, curl. It holds pods and
NetworkAttachmentDefinitions (`k8s.cni.cncf.io/v1`), answers GETs, lets a pod be
written the ways clients write the network-status annotation (NPWG 5):

- `PATCH` on the pod or its `status` subresource, as a JSON merge patch, a
  strategic merge patch (for the metadata maps a plugin touches the two are the
  same) or a JSON patch (RFC 6902);
- `PUT` of the whole pod or of `status` (what the NAD client's `SetNetworkStatus`
  does), refused with 409 when its `resourceVersion` is stale, as JSON or as
  Kubernetes' protobuf (client-go sends that when asked, and Multus asks);

and accepts Events. Every request is recorded, and every change of a pod's
annotations is kept in order (`writes`), so a scenario can see what was written
and how. Anything else is a 404 Status, as an API server without that resource
answers.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

NAD_PREFIX = "/apis/k8s.cni.cncf.io/v1/namespaces/"
POD_PREFIX = "/api/v1/namespaces/"
TOKEN = "npwg-conformance"
MAX_BODY = 8 * 1024 * 1024


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    content_type: str
    body: str


@dataclass(frozen=True)
class AnnotationWrite:
    """One change of a pod's annotations: how it was made and the annotations after it."""

    method: str
    path: str
    content_type: str
    annotations: dict[str, str]


@dataclass
class State:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    writes: dict[tuple[str, str], list[AnnotationWrite]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    version: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"JSON patch path {path!r} does not start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: dict[str, Any], ops: Any) -> dict[str, Any]:
    """RFC 6902's add, replace, remove and test on objects (a pod's metadata needs no more)."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "path" not in op:
            raise ApiError(400, "BadRequest", f"not a JSON patch operation: {op!r}")
        *parents, last = _pointer(str(op["path"]))
        node: Any = doc
        for part in parents:
            if not isinstance(node, dict) or part not in node:
                raise ApiError(422, "Invalid", f"JSON patch path {op['path']!r} does not exist")
            node = node[part]
        if not isinstance(node, dict):
            raise ApiError(422, "Invalid", f"JSON patch path {op['path']!r} is not in an object")
        kind = op.get("op")
        if kind in ("add", "replace"):
            if kind == "replace" and last not in node:
                raise ApiError(422, "Invalid", f"JSON patch replace of missing {op['path']!r}")
            node[last] = copy.deepcopy(op.get("value"))
        elif kind == "remove":
            if last not in node:
                raise ApiError(422, "Invalid", f"JSON patch remove of missing {op['path']!r}")
            del node[last]
        elif kind == "test":
            if node.get(last) != op.get("value"):
                raise ApiError(422, "Invalid", f"JSON patch test failed at {op['path']!r}")
        else:
            raise ApiError(422, "Invalid", f"JSON patch operation {kind!r} is not supported here")
    return doc


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # the harness reports, not the server
        pass

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ApiError(413, "RequestEntityTooLarge", "request body too large")
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        state = self.server.state
        try:
            body = self._body()
            path = self.path.split("?", 1)[0]
            content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip()
            with state.lock:
                state.requests.append(
                    Request(self.command, path, content_type, body.decode("utf-8", "replace"))
                )
                code, answer = _route(state, self.command, path, content_type, body)
        except ApiError as exc:
            code, answer = exc.code, _status(exc.code, exc.reason, exc.message)
        except Exception as exc:  # a bug here must reach the plugin as an answer, not a hang
            code, answer = 500, _status(500, "InternalError", f"npwg-conformance API: {exc!r}")
        self._send(code, answer)

    do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: State) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


def _split(path: str) -> tuple[str, str, str, str, str] | None:
    """(kind, namespace, name, subresource, group path) of a namespaced object path, or None."""
    for prefix, kind in ((POD_PREFIX, "pods"), (NAD_PREFIX, "network-attachment-definitions")):
        if path.startswith(prefix):
            parts = path[len(prefix) :].split("/")
            if len(parts) >= 2 and parts[1] == kind:
                name = parts[2] if len(parts) > 2 else ""
                sub = "/".join(parts[3:])
                return kind, parts[0], name, sub, prefix
    if path.startswith(POD_PREFIX):
        parts = path[len(POD_PREFIX) :].split("/")
        if len(parts) == 2 and parts[1] == "events":
            return "events", parts[0], "", "", POD_PREFIX
    if path.startswith("/apis/events.k8s.io/v1/namespaces/"):
        parts = path[len("/apis/events.k8s.io/v1/namespaces/") :].split("/")
        if len(parts) == 2 and parts[1] == "events":
            return "events", parts[0], "", "", ""
    return None


class _PodMeta(BaseModel):
    """What this API reads of a pod's metadata: the resourceVersion a PUT carries and the two maps
    a plugin writes. Values of `annotations` must be text, as the API server's validation wants
    (422 otherwise); `labels` are kept as sent."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    resource_version: StrictStr | None = Field(None, alias="resourceVersion")
    annotations: dict[str, StrictStr] | None = None
    labels: dict[str, Any] | None = None


class _Pod(BaseModel):
    model_config = ConfigDict(extra="ignore")

    metadata: _PodMeta | None = None


def _meta_of(pod: Any) -> _PodMeta:
    """A pod's metadata, sent or kept (null and absent read as empty); 422 when it does not read."""
    try:
        return _Pod.model_validate(pod).metadata or _PodMeta()
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        detail = "values must be strings" if ".annotations" in f".{where}" else error["msg"]
        raise ApiError(422, "Invalid", f"{where}: {detail}") from None


def _route(state: State, method: str, path: str, content_type: str, body: bytes) -> tuple[int, Any]:
    if path == "/version" and method == "GET":
        return 200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0+npwg-conformance"}
    where = _split(path)
    if where is None:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({method} {path})")
    kind, namespace, name, sub, _ = where
    if kind == "events":
        if method != "POST":
            raise ApiError(405, "MethodNotAllowed", f"{method} on events")
        # client-go's event recorder may send protobuf (Multus asks for it); an Event is kept, not read.
        event = _json(body) if content_type != PROTOBUF else {"protobuf": len(body)}
        state.events.append(event)
        return 201, event
    if not name:
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{method} on a {kind} list")
        items = [o for (k, ns, _), o in state.objects.items() if k == kind and ns == namespace]
        return 200, {
            "kind": "List",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(state.version)},
            "items": items,
        }
    if sub not in ("", "status") or (sub == "status" and kind != "pods"):
        raise ApiError(404, "NotFound", f"no subresource {sub!r} of {kind}")
    key = (kind, namespace, name)
    current = state.objects.get(key)
    if current is None:
        raise ApiError(404, "NotFound", f'{kind} "{name}" not found')
    if method == "GET":
        return 200, current
    if kind != "pods" or method not in ("PATCH", "PUT"):
        raise ApiError(
            405, "MethodNotAllowed", f"{method} on {kind} is not served by the npwg-conformance API"
        )
    if method == "PUT":
        new = pod_metadata_from_protobuf(body) if content_type == PROTOBUF else _json(body)
        if not isinstance(new, dict):
            raise ApiError(400, "BadRequest", "the body of a PUT is the object")
        sent = _meta_of(new)
        if sent.resource_version and sent.resource_version != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods "{name}": the object has '
                "been modified; please apply your changes to the latest version and try again",
            )
        # Only metadata may change here: the harness's pods have no spec worth replacing.
        updated = copy.deepcopy(current)
        updated["metadata"]["annotations"] = dict(sent.annotations or {})
        updated["metadata"]["labels"] = dict(sent.labels or {})
    elif content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        updated = merge_patch(current, _json(body))
    elif content_type == "application/json-patch+json":
        updated = json_patch(current, _json(body))
    else:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"PATCH with Content-Type {content_type!r}: use "
            "application/merge-patch+json, strategic-merge-patch+json or json-patch+json",
        )
    annotations = _meta_of(updated).annotations or {}
    for fixed in ("name", "namespace", "uid"):
        updated["metadata"][fixed] = current["metadata"][fixed]
    state.version += 1
    updated["metadata"]["resourceVersion"] = str(state.version)
    state.objects[key] = updated
    before = _meta_of(current).annotations or {}
    if annotations != before:
        state.writes.setdefault((namespace, name), []).append(
            AnnotationWrite(method, path, content_type, dict(annotations))
        )
    return 200, updated


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "BadRequest", "the body is JSON nested too deeply") from None


# --- Kubernetes' protobuf encoding, as far as a pod's metadata ---------------------------------
# client-go sends built-in objects as protobuf when told to (Multus sets ContentType to it), so a
# PUT of a pod may arrive that way. The envelope (Kubernetes API concepts, "Protobuf encoding"):
# b"k8s\x00", then runtime.Unknown {typeMeta = 1; raw = 2; contentEncoding = 3; contentType = 4};
# `raw` is the Pod {metadata = 1; spec = 2; status = 3}; ObjectMeta {name = 1; namespace = 3;
# uid = 5; resourceVersion = 6; labels = 11; annotations = 12} with map entries {key = 1; value = 2}.
# Only those metadata fields are read: the harness's pods have nothing else a plugin may change.

PROTOBUF = "application/vnd.kubernetes.protobuf"
PROTOBUF_MAGIC = b"k8s\x00"


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as int, length-delimited as bytes."""
    i = 0

    def varint() -> int:
        nonlocal i
        value, shift = 0, 0
        while True:
            if i >= len(data) or shift > 63:
                raise ApiError(400, "BadRequest", "protobuf body: truncated or over-long varint")
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            yield number, varint()
        elif wire == 2:
            length = varint()
            if i + length > len(data):
                raise ApiError(400, "BadRequest", "protobuf body: a field runs past the end")
            yield number, data[i : i + length]
            i += length
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ApiError(400, "BadRequest", f"protobuf body: unsupported wire type {wire}")


def _message(data: int | bytes, what: str) -> bytes:
    if not isinstance(data, bytes):
        raise ApiError(400, "BadRequest", f"protobuf body: {what} is not a message")
    return data


def _text(data: int | bytes, what: str) -> str:
    try:
        return _message(data, what).decode()
    except UnicodeDecodeError:
        raise ApiError(400, "BadRequest", f"protobuf body: {what} is not UTF-8") from None


def pod_metadata_from_protobuf(body: bytes) -> dict[str, Any]:
    """`{"metadata": {resourceVersion, labels, annotations}}` of a protobuf-encoded Pod."""
    if not body.startswith(PROTOBUF_MAGIC):
        raise ApiError(400, "BadRequest", "protobuf body: no k8s\\x00 envelope")
    raw = b""
    for number, value in _fields(body[len(PROTOBUF_MAGIC) :]):
        if number == 2:
            raw = _message(value, "Unknown.raw")
    meta: dict[str, Any] = {"labels": {}, "annotations": {}}
    for number, value in _fields(raw):
        if number != 1:
            continue
        for field_number, item in _fields(_message(value, "Pod.metadata")):
            if field_number == 6:
                meta["resourceVersion"] = _text(item, "ObjectMeta.resourceVersion")
            elif field_number in (11, 12):
                entry = dict(_fields(_message(item, "a map entry")))
                target = meta["labels" if field_number == 11 else "annotations"]
                target[_text(entry.get(1, b""), "a map key")] = _text(entry.get(2, b""), "a map value")
    return {"metadata": meta}


class KubeApi:
    """The API, started on a free port of 127.0.0.1; `with KubeApi() as api:` stops it afterwards."""

    def __init__(self) -> None:
        self.state = State()
        self._server = _Server(self.state)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="npwg-conformance-api", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> KubeApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def put(self, obj: dict[str, Any]) -> None:
        kind = {"Pod": "pods", "NetworkAttachmentDefinition": "network-attachment-definitions"}[obj["kind"]]
        meta = obj["metadata"]
        with self.state.lock:
            self.state.version += 1
            stored = copy.deepcopy(obj)
            stored["metadata"].setdefault("resourceVersion", str(self.state.version))
            stored["metadata"]["resourceVersion"] = str(self.state.version)
            self.state.objects[(kind, meta["namespace"], meta["name"])] = stored

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        with self.state.lock:
            return copy.deepcopy(self.state.objects[("pods", namespace, name)])

    def writes(self, namespace: str, name: str) -> list[AnnotationWrite]:
        with self.state.lock:
            return list(self.state.writes.get((namespace, name), []))

    def requests(self) -> Iterator[Request]:
        with self.state.lock:
            return iter(list(self.state.requests))

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for this API. It is JSON, which every YAML reader also reads."""
        name = "npwg-conformance"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": name,
                    "clusters": [{"name": name, "cluster": {"server": self.url}}],
                    "users": [{"name": name, "user": {"token": TOKEN}}],
                    "contexts": [
                        {"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}
                    ],
                },
                indent=2,
            )
        )
        return path
