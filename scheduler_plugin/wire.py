"""The kube-scheduler extender v1 JSON protocol (`k8s.io/kube-scheduler/extender/v1`).

Those Go structs carry no json tags, so kube-scheduler marshals them with the
Go field names (`Pod`, `Nodes`, `NodeNames`, `FailedNodes`, ...), and Go's
decoder matches keys case-insensitively. We read the capitalized names and the
lower-camel ones, and always write the capitalized ones.

`Nodes` is a `*v1.NodeList` (it has json tags: `items`), sent only when the
extender is configured with `nodeCacheCapable: false`; `NodeNames` is a
`*[]string`, sent only with `nodeCacheCapable: true`. The reply uses the shape
of the request: kube-scheduler reads `NodeNames` back only when it sent them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson
import pydantic
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticSerializationError

from podnetwork.ground import constants
from podnetwork.ground.core import Pod

#: Longest message the extender writes (a node's reason, an HTTP error), in characters.
#: kube-scheduler cuts the messages it copies into FailedScheduling events and the
#: PodScheduled condition to 1024 bytes (its `noteLengthLimit`): more only repeats the input.
MAX_MESSAGE_CHARS = 1024
#: Field problems named in one message; the rest are counted ("and 12 more").
MAX_PROBLEMS_SHOWN = 5


def readable(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` as a message can carry it: cut after `limit` characters (saying how many
    were left out), and lone surrogates, which UTF-8 cannot encode, written as `\\udXXX`."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def summary(problems: list[str], total: int) -> str:
    """The first problems of `total` joined with `; `, saying how many more there are."""
    text = "; ".join(problems)
    return f"{text}; and {total - len(problems)} more" if total > len(problems) else text


class NodeList(BaseModel):
    """`v1.NodeList`: only `items` is read; each node is kept as sent, to be echoed back."""

    model_config = ConfigDict(extra="ignore")

    items: list[dict[str, Any]] | None = Field(None, validation_alias=AliasChoices("items", "Items"))


class ExtenderArgs(BaseModel):
    """The body of `filter` and `prioritize` calls."""

    # cache_strings (pydantic's default, stated because the decision relies on it for
    # speed, never for correctness): a node name seen before comes back as the same
    # str object, so the decision's tables find it by identity.
    model_config = ConfigDict(extra="ignore", cache_strings="all")

    pod: Pod = Field(validation_alias=AliasChoices("Pod", "pod"))
    """The pod being scheduled (`*v1.Pod`), read into the `Pod` view (what the decision reads)."""
    nodes: NodeList | None = Field(None, validation_alias=AliasChoices("Nodes", "nodes"))
    """Candidate nodes, when `nodeCacheCapable: false`."""
    node_names: list[str] | None = Field(
        None, validation_alias=AliasChoices("NodeNames", "nodeNames", "nodenames")
    )
    """Candidate node names, when `nodeCacheCapable: true`."""

    @pydantic.field_validator("pod", mode="before")
    @classmethod
    def pod_shape(cls, pod: Any) -> Any:
        # What the decision reads, with messages of our own before the view's checks;
        # the view ignores the rest of the pod, which is kube-scheduler's.
        if not isinstance(pod, dict):
            return pod  # the view says "Input should be an object"
        # Go's encoder writes nil structs as null: the same as absent.
        pod = {key: value for key, value in pod.items() if value is not None}
        meta = pod.get("metadata", {})
        if meta is not None and not isinstance(meta, dict):
            raise ValueError("metadata must be an object")
        annotations = (meta or {}).get("annotations")
        if annotations is not None and not (
            isinstance(annotations, dict) and all(isinstance(v, str) for v in annotations.values())
        ):
            raise ValueError("metadata.annotations must be a map of strings")
        for key in ("spec", "status"):
            if pod.get(key) is not None and not isinstance(pod[key], dict):
                raise ValueError(f"{key} must be an object")
        spec = pod.get("spec")
        os_ = spec.get("os") if isinstance(spec, dict) else None
        if os_ is not None and not (isinstance(os_, dict) and isinstance(os_.get("name", ""), str)):
            raise ValueError('spec.os must be an object such as {"name": "linux"}')
        namespace = (meta or {}).get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise ValueError("metadata.namespace must be a string")
        return pod

    @pydantic.model_validator(mode="after")
    def _one_shape(self) -> ExtenderArgs:
        if (self.nodes is None) == (self.node_names is None):
            raise ValueError(
                "exactly one of Nodes (nodeCacheCapable: false) or NodeNames "
                "(nodeCacheCapable: true) must be set"
            )
        return self

    def node_items(self) -> list[dict[str, Any]]:
        return (self.nodes.items if self.nodes else None) or []

    def candidate_names(self) -> list[str]:
        """The candidate node names, in request order; a node without a name is an error."""
        if self.node_names is not None:
            return self.node_names
        names = []
        for i, node in enumerate(self.node_items()):
            meta = node.get("metadata")
            name = meta.get("name") if isinstance(meta, dict) else None
            if not isinstance(meta, dict) or not isinstance(name, str) or not name:
                raise ValueError(f"Nodes.items[{i}].metadata.name: Required value")
            # The decision reads each node's annotations (the networks it offers).
            annotations = meta.get("annotations")
            if annotations and not isinstance(annotations, dict):
                raise ValueError(f"Nodes.items[{i}].metadata.annotations: must be a map of strings")
            offered = annotations.get(constants.NODE_PODNETWORKS_ANNOTATION) if annotations else None
            if offered is not None and not isinstance(offered, str):
                raise ValueError(
                    f"Nodes.items[{i}].metadata.annotations[{constants.NODE_PODNETWORKS_ANNOTATION}]: "
                    "must be a string"
                )
            names.append(name)
        return names

    def node_annotations(self) -> dict[str, str | None]:
        """Node name -> its podnetworks annotation (None: absent), for `Nodes` requests.

        Call after `candidate_names`, which checks the types; a name sent twice keeps
        its first node, the one the reply echoes.
        """
        key = constants.NODE_PODNETWORKS_ANNOTATION
        found: dict[str, str | None] = {}
        for node in self.node_items():
            meta = node["metadata"]
            annotations = meta.get("annotations")  # a map or absent: `candidate_names` checked
            found.setdefault(meta["name"], annotations.get(key) if annotations else None)
        return found


#: The keys of the bodies kube-scheduler writes with `nodeCacheCapable: true`.
_SCHEDULER_KEYS = frozenset({"Pod", "Nodes", "NodeNames"})
#: pydantic's JSON parser refuses nesting deeper than 200 levels (docs/limits.md). A body
#: holding at most this many `[` and `{` bytes cannot nest deeper, whatever parser reads it.
_FAST_OPENERS = 200


#: Every digit byte as `1`, every other byte as `0`.
_DIGITS = bytes(0x31 if 0x30 <= i <= 0x39 else 0x30 for i in range(256))
#: The shortest run of digits that may be an integer orjson cannot hold (past 64 bits it
#: reads a float where pydantic reads the integer itself).
_LONG_NUMBER = b"1" * 19


def _orjson_reads_alike(text: bytes | bytearray) -> bool:
    """Whether orjson reads every number of `text` as the long way does (conservative: a run
    of 19 digits inside a string also says no)."""
    return text.translate(_DIGITS).find(_LONG_NUMBER) < 0


def parse_args(body: bytes | bytearray) -> ExtenderArgs:
    """A request body read into `ExtenderArgs`: the same result, and the same errors, as
    `ExtenderArgs.model_validate_json(body)`.

    kube-scheduler's own bodies (`Pod` and `NodeNames`, `"Nodes":null`) take a shorter way:
    orjson reads the JSON (about twice as fast as pydantic's parser building the pod and
    every name), a C-level pass checks that every name is a string, and only the pod goes
    through its models. Anything else, or anything that way refuses, is read the long way,
    so a bad body gets the message it always got (tests/unit/extender/test_wire.py compares
    the two ways on generated bodies).
    """
    fast = _scheduler_args(body)
    return fast if fast is not None else ExtenderArgs.model_validate_json(body)


def _scheduler_args(body: bytes | bytearray) -> ExtenderArgs | None:
    if body.count(b"[") + body.count(b"{") > _FAST_OPENERS or not _orjson_reads_alike(body):
        return None  # maybe deeper than the long way allows, or a huge integer: let it decide
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict or not data.keys() <= _SCHEDULER_KEYS or data.get("Nodes") is not None:
        return None
    pod, names = data.get("Pod"), data.get("NodeNames")
    if type(pod) is not dict or type(names) is not list or not set(map(type, names)) <= {str}:
        return None
    view = _pod_view(pod)
    return None if view is None else ExtenderArgs.model_construct(pod=view, nodes=None, node_names=names)


#: How Go's `json.Marshal(ExtenderArgs{Pod, Nodes: nil, NodeNames})` begins, and what
#: stands between the pod and the names.
_GO_HEAD = b'{"Pod":'
_GO_NAMES = b',"Nodes":null,"NodeNames":['
_GO_TAIL = b"]}"


@dataclass(frozen=True, slots=True)
class PodFields:
    """What the filter decision reads of a pod (the rest is kube-scheduler's)."""

    namespace: str | None
    networks: str | None
    """The `multinetwork.x-k8s.io/networks` annotation, None when absent."""
    host_network: bool | None
    os_name: str | None
    """`spec.os.name` (`""` when `spec.os` has no name), None without `spec.os`."""

    @classmethod
    def of(cls, pod: Pod) -> PodFields:
        spec = pod.spec
        return cls(pod.metadata.namespace, pod.metadata.annotation(constants.NETWORKS_ANNOTATION),
                   spec.host_network, None if spec.os is None else spec.os.name)


@dataclass(frozen=True, slots=True)
class SchedulerBody:
    """A body in the exact layout kube-scheduler writes, its names left as bytes.

    `names` is the text between the first and last quote of the `NodeNames` array,
    split at `","`: when each piece is a name that JSON writes without escapes, the array
    holds exactly those names. The caller must check that (`decision.filter_encoded`
    looks each piece up among the known plain names, and goes the long way when one is
    missing); until then a piece is only bytes.
    """

    pod: PodFields
    names: list[bytes]


def scheduler_body(body: bytes | bytearray) -> SchedulerBody | None:
    """`body` read without reading the names, when it has kube-scheduler's layout and a
    pod the long way surely accepts; None otherwise (then use `parse_args`).

    Why the layout is certain once the names are known: the bytes
    `,"Nodes":null,"NodeNames":[` cannot occur inside a JSON string (a `"` there always
    follows a backslash); the pod between `{"Pod":` and their last occurrence must parse
    as one JSON value; and what follows them is `"`-quoted plain names joined by `,`,
    then `]}`. So the body is the object {Pod, Nodes: null, NodeNames}, each key once.
    (orjson reads an integer past 64 bits as a float: that may change a number in the
    pod's metadata, never whether the pod is accepted or a field the decision reads.)
    """
    if not body.startswith(_GO_HEAD) or not body.endswith(_GO_TAIL):
        return None
    cut = body.rfind(_GO_NAMES)
    if cut < 0:
        return None
    pod_text = body[len(_GO_HEAD):cut]
    if pod_text.count(b"[") + pod_text.count(b"{") + 2 > _FAST_OPENERS:
        return None  # as in `_scheduler_args`
    names_text = body[cut + len(_GO_NAMES):-len(_GO_TAIL)]
    if names_text:
        if names_text[:1] != b'"' or names_text[-1:] != b'"' or len(names_text) < 2:
            return None
        names = bytes(names_text[1:-1]).split(b'","')
    else:
        names = []
    try:
        pod = orjson.loads(pod_text)
    except orjson.JSONDecodeError:
        return None
    fields = pod_fields(pod)
    return None if fields is None else SchedulerBody(fields, names)


#: The pod's keys the views read (`podnetwork.ground.core.Pod`), under their JSON names.
POD_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
META_STRINGS = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
META_KEYS = frozenset({*META_STRINGS, "generation", "labels", "annotations", "finalizers"})
SPEC_KEYS = frozenset({"nodeName", "hostNetwork", "os", "schedulingGates"})
STATUS_KEYS = frozenset({"phase"})
#: The views also accept their Python names (`populate_by_name`): such a pod takes the long way.
PYTHON_NAMES = frozenset({"api_version", "resource_version", "creation_timestamp", "deletion_timestamp",
                          "node_name", "host_network", "scheduling_gates"})
_STRINGS = frozenset({str})


def _strings(value: Any) -> bool:
    """None, or a map whose every value is a string."""
    return value is None or (type(value) is dict and set(map(type, value.values())) <= _STRINGS)


def pod_fields(pod: Any) -> PodFields | None:
    """The fields the decision reads, when the long way (`ExtenderArgs.pod_shape`, then the
    `Pod` view) surely accepts `pod` as orjson read it; None when unsure: then ask the long way.

    Each field the views read must have the one JSON type a pod from the API server has;
    anything else (a number where a string goes, a Python spelling of a key) is for the
    models to judge. The views' fields are listed above; tests/unit/extender/test_wire.py
    fails when the views read a field this does not check.
    """
    if type(pod) is not dict:
        return None
    meta, spec, status = pod.get("metadata"), pod.get("spec"), pod.get("status")
    if type(meta) is not dict or type(spec) is not dict or not _optional(status, dict):
        return None
    if not (_optional(pod.get("kind"), str) and _optional(pod.get("apiVersion"), str)):
        return None
    for key in META_STRINGS:
        if not _optional(meta.get(key), str):
            return None
    annotations, finalizers = meta.get("annotations"), meta.get("finalizers")
    if not (_optional(meta.get("generation"), int) and _strings(annotations)
            and _strings(meta.get("labels"))):
        return None
    if finalizers is not None and (type(finalizers) is not list
                                   or not set(map(type, finalizers)) <= _STRINGS):
        return None
    host_network, os_, gates = spec.get("hostNetwork"), spec.get("os"), spec.get("schedulingGates")
    if not (_optional(spec.get("nodeName"), str) and _optional(host_network, bool)):
        return None
    os_name = None
    if os_ is not None:
        os_name = os_.get("name", "") if type(os_) is dict else None
        if type(os_name) is not str:
            return None
    if gates is not None and (type(gates) is not list or not all(
            type(gate) is dict and type(gate.get("name")) is str for gate in gates)):
        return None
    if status is not None and not _optional(status.get("phase"), str):
        return None
    if ("api_version" in pod or "resource_version" in meta or "creation_timestamp" in meta
            or "deletion_timestamp" in meta or "node_name" in spec or "host_network" in spec
            or "scheduling_gates" in spec):
        return None  # PYTHON_NAMES
    networks = annotations.get(constants.NETWORKS_ANNOTATION) if annotations else None
    return PodFields(meta.get("namespace"), networks, host_network, os_name)


def _optional(value: Any, kind: type) -> bool:
    return value is None or type(value) is kind


def _pod_view(pod: Any) -> Pod | None:
    """The pod as the long way reads it, or None where the long way words a message."""
    if type(pod) is not dict:
        return None
    try:
        return Pod.model_validate(ExtenderArgs.pod_shape(pod))
    except (ValueError, pydantic.ValidationError):
        return None


class ExtenderFilterResult(BaseModel):
    """The reply to `filter`, with the Go field names (read back by the demo's kube-scheduler)."""

    model_config = ConfigDict(populate_by_name=True)

    nodes: dict[str, Any] | None = Field(None, alias="Nodes")
    node_names: list[str] | None = Field(None, alias="NodeNames")
    # Go's encoder writes a nil map as null, which kube-scheduler reads as empty.
    failed_nodes: dict[str, str] = Field(default_factory=dict, alias="FailedNodes")
    failed_and_unresolvable_nodes: dict[str, str] = Field(
        default_factory=dict, alias="FailedAndUnresolvableNodes")
    error: str = Field("", alias="Error")

    @field_validator("failed_nodes", "failed_and_unresolvable_nodes", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @property
    def failures(self) -> dict[str, str]:
        """Every failed node with its reason, whichever field it came in."""
        return {**self.failed_nodes, **self.failed_and_unresolvable_nodes}

    def to_json(self) -> bytes:
        """The reply as kube-scheduler reads it: every field, under its Go name.

        orjson writes the same bytes as pydantic's serializer (the fields are plain
        strings, lists and dicts, and echoed nodes are plain JSON) about four times
        faster; with thousands of candidates the reply is a large part of a call.
        """
        fields = {
            "Nodes": self.nodes,
            "NodeNames": self.node_names,
            "FailedNodes": self.failed_nodes,
            "FailedAndUnresolvableNodes": self.failed_and_unresolvable_nodes,
            "Error": self.error,
        }
        try:
            return orjson.dumps(fields)
        except orjson.JSONEncodeError:  # what orjson refuses (an echoed integer over 64 bits)
            pass
        try:
            return self.__pydantic_serializer__.to_json(self, by_alias=True)
        except PydanticSerializationError:
            # A lone surrogate cannot be UTF-8: written as a \\udXXX escape, which Go reads as U+FFFD.
            return json.dumps(fields, ensure_ascii=True, separators=(",", ":")).encode()


class HostPriority(BaseModel):
    """One entry of the reply to `prioritize` (`HostPriorityList`): score 0..10."""

    host: str = Field(serialization_alias="Host")
    score: int = Field(ge=0, le=10, serialization_alias="Score")


HostPriorityList = pydantic.TypeAdapter(list[HostPriority])


def neutral_scores(names: list[str]) -> bytes:
    """The `HostPriorityList` giving every node in `names` score 0, as JSON.

    orjson over plain dicts writes what `HostPriorityList` would, without a model per
    node (with 500 names: ~1.3 ms through the models, a few tens of µs here).
    """
    try:
        return orjson.dumps([{"Host": name, "Score": 0} for name in names])
    except orjson.JSONEncodeError:  # a lone surrogate: written as a \\udXXX escape, as /filter does
        return json.dumps([{"Host": name, "Score": 0} for name in names], ensure_ascii=True,
                          separators=(",", ":")).encode()


#: Added to the JSON parser's complaint about a `\\uD800`-`\\uDFFF` escape that is not part of a pair.
_SURROGATE_HINT = (
    " (\\uD800-\\uDFFF escapes are halves of UTF-16 surrogate pairs: a high one, \\uD800-\\uDBFF,"
    " must be followed by a low one, \\uDC00-\\uDFFF)"
)


def describe(exc: pydantic.ValidationError) -> str:
    """A one-line account of what is wrong with a request body (the first few problems)."""
    parts = []
    errors = exc.errors(include_url=False, include_input=False)
    for err in errors[:MAX_PROBLEMS_SHOWN]:
        loc = ""
        for part in err["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
        message = err["msg"]
        if err["type"] == "json_invalid" and "hex escape" in message:
            message += _SURROGATE_HINT
        parts.append(f"{loc}: {message}" if loc else message)
    return readable(summary(parts, len(errors)))
