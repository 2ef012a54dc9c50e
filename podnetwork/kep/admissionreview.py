"""AdmissionReview v1 at the edge of the pod webhooks: bytes in, a typed review or a clear refusal.

Shared by the controller's webhooks (`podnetwork.kep.admission`) and the bridge's
(`bridge.operator.admission`). Two kinds of malformation, answered differently:

- The body is not an AdmissionReview v1 request: not JSON, nested too deep,
  or the envelope the API server fills in (`kind`, `apiVersion`, `request.uid`,
  `request.kind`, `request.operation`, `request.namespace`, `request.object`...)
  has the wrong type. `BadReview` (HTTP 400) names the field path; there is no
  review to answer (a uid that is not text cannot even be echoed).
- The envelope is sound but the pod in `request.object` is not a Pod's shape
  (`metadata` a string, `spec.schedulingGates` a number, `metadata.namespace`
  an object...). That is a bad pod, and the API server only reads an
  AdmissionReview answer: any other status is a failed call, which
  failurePolicy Fail turns into a refusal that names no field. So the pod is
  refused in a proper answer, with the uid echoed, code 422 and one
  StatusCause per field, as the API server reports its own validation.

`null` counts as absent everywhere, as Go's decoder (the API server's) reads it.
The API server never sends lone UTF-16 surrogates (Go writes U+FFFD instead);
JSON's `\\ud800` escape can still carry one, which no UTF-8 text can hold, so
text fields refuse them; answers are written as ASCII JSON, so nothing a
request carries can break the encoding of the answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Literal

import pydantic
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import ErrorDetails

from podnetwork.ground import jsontype
from podnetwork.ground.fielderrors import ErrorType, FieldError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
#: Field errors listed in one message; the rest are counted (a body can hold thousands).
MAX_LISTED_ERRORS = 10
#: Characters of a map key or value quoted in a message.
MAX_QUOTED = 64

_SURROGATE = re.compile("[\ud800-\udfff]")


class BadReview(ValueError):
    """The body is not an AdmissionReview v1 request; the message says what is wrong (HTTP 400)."""


def _no_surrogates(text: str) -> str:
    found = _SURROGATE.search(text)
    if found:
        raise ValueError(f"must be valid Unicode text, but has a lone surrogate U+{ord(found.group()):04X} "
                         "(an unpaired \\u escape)")
    return text


def _absent_is_empty(value: Any) -> Any:
    return "" if value is None else value


#: Text without lone surrogates.
Text = Annotated[str, AfterValidator(_no_surrogates)]
#: Text that may be absent or null (Go's zero value).
OptionalText = Annotated[Text, BeforeValidator(_absent_is_empty)]


class _Model(BaseModel):
    # Strict: a number is not a string, "true" is not a boolean (the API server's
    # types are Go's). Unknown fields are kept out of the way, not refused: a
    # newer API server may send more.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, populate_by_name=True)


class GroupVersionKind(_Model):
    group: OptionalText = ""
    version: OptionalText = ""
    kind: OptionalText = ""


class UserInfo(_Model):
    """Who sent the request (k8s.io/api/authentication/v1 UserInfo), as a SubjectAccessReview takes it."""

    username: OptionalText = ""
    uid: OptionalText = ""
    groups: list[Text] | None = None
    extra: dict[Text, list[Text] | None] | None = None


class AdmissionRequest(_Model):
    """The fields of `request` the webhooks read (k8s.io/api/admission/v1 AdmissionRequest)."""

    uid: Annotated[Text, Field(min_length=1)]
    """Echoed in the answer, so the API server can match it."""
    kind: GroupVersionKind
    operation: Text
    """CREATE, UPDATE, DELETE or CONNECT; other values are passed through unchanged."""
    sub_resource: OptionalText = Field("", alias="subResource")
    name: OptionalText = ""
    namespace: OptionalText = ""
    object: dict[str, Any] | None = None
    """The object as it would be stored; a pod's is read apart (`pod`, `pods`)."""
    old_object: dict[str, Any] | None = Field(None, alias="oldObject")
    user_info: UserInfo | None = Field(None, alias="userInfo")
    """The requesting user; absent from in-process callers (the demo), which are not authorized."""

    @property
    def is_pod(self) -> bool:
        return self.kind.kind == "Pod" and not self.kind.group

    def pod(self) -> Pod:
        """`object` read as a Pod (absent: an empty one). Raises `InvalidPod` naming its fields."""
        return self._reads[0].pod()

    def pods(self) -> tuple[Pod, Pod | None]:
        """`object` and `oldObject` read as Pods (an absent old object is None). Raises
        `InvalidPod` naming the fields of both, the old object's under `oldObject.`."""
        new, old = self._reads
        if old is None:
            return new.pod(), None
        errors = new.errors + old.errors
        if errors:
            raise InvalidPod(errors, new.name)
        return new.pod(), old.pod()

    @cached_property
    def _reads(self) -> tuple[_Read, _Read | None]:
        # Parse, don't validate: each object is read once, whoever asks and however often.
        old = None if self.old_object is None else _read(self.old_object, "oldObject.")
        return _read(self.object or {}, ""), old


class AdmissionReview(_Model):
    api_version: Literal["admission.k8s.io/v1"] | None = Field(None, alias="apiVersion")
    """Absent is taken as v1 (in-process callers); another version is refused: this webhook
    answers v1 only, and the API server refuses an answer in another version than it asked."""
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


# --- the pod's shape: what either webhook reads of a Pod --------------------------------------

class _Wire(_Model):
    """A part of the pod: a field is read under its name on the wire only.

    Its Python name (`host_network` for `hostNetwork`), which no API server sends, is
    checked for its type like the wire name (the shape has always been checked so) but
    never read: the decisions see what the same pod's JSON says under the wire names.
    """

    @model_validator(mode="wrap")
    @classmethod
    def _wire_names_only(cls, data: Any, handler: pydantic.ValidatorFunctionWrapHandler) -> Any:
        model = handler(data)
        if isinstance(data, Mapping):
            unread = {name: field.get_default(call_default_factory=True)
                      for name, field in cls.model_fields.items()
                      if field.alias and field.alias != name and field.alias not in data and name in data}
            if unread:
                model = model.model_copy(update=unread)
        return model


class ObjectMeta(_Wire):
    name: OptionalText = ""
    generate_name: OptionalText = Field("", alias="generateName")
    namespace: OptionalText = ""
    resource_version: OptionalText = Field("", alias="resourceVersion")
    annotations: dict[Text, Text] | None = None


class SchedulingGate(_Wire):
    name: Text


class PodOS(_Wire):
    name: OptionalText = ""


class PodSpec(_Wire):
    host_network: bool | None = Field(None, alias="hostNetwork")
    node_name: OptionalText = Field("", alias="nodeName")
    scheduling_gates: list[SchedulingGate] | None = Field(None, alias="schedulingGates")
    service_account_name: OptionalText = Field("", alias="serviceAccountName")
    os: PodOS | None = None


class Pod(_Wire):
    """A pod as the webhooks read it: the fields they read, each of its type."""

    metadata: ObjectMeta | None = None
    spec: PodSpec | None = None

    @property
    def name(self) -> str:
        """Its name, or before it has one its generateName ("" when neither)."""
        meta = self.metadata
        return (meta.name or meta.generate_name) if meta is not None else ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace if self.metadata is not None else ""

    @property
    def annotations(self) -> Mapping[str, str]:
        return (self.metadata.annotations if self.metadata is not None else None) or {}

    def annotation(self, key: str) -> str | None:
        return self.annotations.get(key)

    @property
    def host_network(self) -> bool:
        return self.spec is not None and self.spec.host_network is True

    @property
    def service_account_name(self) -> str:
        """`spec.serviceAccountName` ("" when unset)."""
        return self.spec.service_account_name if self.spec is not None else ""

    @property
    def os_name(self) -> str:
        """`spec.os.name` ("" when unset)."""
        return self.spec.os.name if self.spec is not None and self.spec.os is not None else ""


class InvalidPod(ValueError):
    """A pod request's object (or old object) is not a Pod's shape: one field error per field,
    and the name the refusal gives the pod (read leniently, as its shape is wrong)."""

    def __init__(self, errors: Sequence[FieldError], name: str) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = list(errors)
        self.name = name


class _Read:
    """One object read as a Pod: the view, or the field errors that keep it from being one."""

    def __init__(self, view: Pod | None, errors: list[FieldError], name: str) -> None:
        self.view, self.errors, self.name = view, errors, name

    def pod(self) -> Pod:
        if self.view is None:
            raise InvalidPod(self.errors, self.name)
        return self.view


def _read(obj: Mapping[str, Any], prefix: str) -> _Read:
    try:
        view = Pod.model_validate(obj)
    except pydantic.ValidationError as exc:
        errors = [_field_error(prefix + _path(err["loc"]), err) for err in exc.errors()]
        return _Read(None, errors, name_of(obj))
    return _Read(view, [], view.name)


def read_pod(obj: Mapping[str, Any]) -> Pod:
    """`obj` read as a Pod. Raises `InvalidPod` naming what makes it not a Pod's shape."""
    return _read(obj, "").pod()


def name_of(obj: Mapping[str, Any] | None) -> str:
    """The name (or generateName) of an object whose shape may be wrong ("" when it has none)."""
    meta = (obj or {}).get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return next((n for n in (meta.get("name"), meta.get("generateName")) if isinstance(n, str) and n), "")


# --- reading ------------------------------------------------------------------------------------

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def decode(raw: bytes) -> Any:
    """The body as JSON (RFC 8259: UTF-8, no NaN or Infinity). Raises `BadReview`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadReview(f"the body is not UTF-8 text (byte {exc.start}): send the AdmissionReview "
                        "as JSON") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise BadReview(f"the body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        # Python's parser gives up near its recursion limit (about 1,000 levels); a Pod
        # nests a few dozen.
        raise BadReview("the body nests JSON deeper than this webhook reads (about 1,000 levels)") from None
    except ValueError as exc:  # NaN/Infinity, an integer of more than 4,300 digits
        raise BadReview(f"the body is not JSON: {exc}") from None


def parse(raw: bytes) -> AdmissionReview:
    """A request body as a typed AdmissionReview. Raises `BadReview` naming what is wrong."""
    return review_of(decode(raw))


def review_of(body: Any) -> AdmissionReview:
    """Decoded JSON as a typed AdmissionReview. Raises `BadReview` naming the field paths."""
    if isinstance(body, AdmissionReview):
        return body
    if not isinstance(body, Mapping):
        raise BadReview(f"expected an AdmissionReview ({API_VERSION}) object, got {jsontype.describe(body)}")
    try:
        return AdmissionReview.model_validate(body)
    except pydantic.ValidationError as exc:
        errors = [f"{_path(err['loc'])}: {_problem(err)}" for err in exc.errors()]
        raise BadReview(f"not an AdmissionReview ({API_VERSION}) request: {_listing(errors)}") from None


def request_of(request: AdmissionRequest | Mapping[str, Any]) -> AdmissionRequest:
    """`request` as the typed model (in-process callers pass the JSON dict). Raises `BadReview`."""
    if isinstance(request, AdmissionRequest):
        return request
    return review_of({"kind": KIND, "request": request}).request


# --- answering ----------------------------------------------------------------------------------

def allowed(uid: str, **extra: Any) -> dict[str, Any]:
    """An answer that admits the object (with a patch or warnings in `extra`)."""
    return {"apiVersion": API_VERSION, "kind": KIND, "response": {"uid": uid, "allowed": True, **extra}}


def refused(uid: str, name: str, errors: Sequence[FieldError], *, what: str = "is invalid",
            code: int = 422) -> dict[str, Any]:
    """An answer that refuses the pod `name`: code 422, reason Invalid (or 403 Forbidden, for a
    missing permission), one StatusCause per field error, and a message that names the pod and
    lists the errors."""
    message = f'Pod "{name}" {what}: ' + _listing([str(e) for e in errors])
    return {"apiVersion": API_VERSION, "kind": KIND, "response": {"uid": uid, "allowed": False, "status": {
        "status": "Failure",
        "code": code,
        "reason": "Forbidden" if code == 403 else "Invalid",
        "message": message,
        "details": {"name": name, "kind": "Pod", "causes": [e.to_status_cause() for e in errors]},
    }}}


def encode(document: Any) -> bytes:
    """JSON for the wire. ASCII, so that text carried over from a request (a pod name, an
    annotation key with a lone surrogate) is escaped and never breaks the encoding."""
    return json.dumps(document, ensure_ascii=True, separators=(",", ":")).encode("ascii")


# --- messages -----------------------------------------------------------------------------------

def _cut(text: str) -> str:
    return text if len(text) <= MAX_QUOTED else text[:MAX_QUOTED] + "..."


def _path(loc: Sequence[str | int]) -> str:
    """A pydantic location as a Kubernetes field path: `spec.schedulingGates[0].name`,
    `metadata.annotations[example.com/key]`."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":  # pydantic's mark for an error in the key just before
            continue
        elif i >= 2 and loc[i - 1] == "annotations" and loc[i - 2] == "metadata":
            out += f"[{_cut(part)}]"
        else:
            out += f".{part}" if out else part
    return out or "<body>"


_EXPECTED = {
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "list_type": "must be a list",
}


def _problem(err: ErrorDetails) -> str:
    kind = err["type"]
    ctx: dict[str, Any] = err.get("ctx", {})
    if kind == "missing":
        return "is required"
    if kind in _EXPECTED:
        return f"{_EXPECTED[kind]}, not {jsontype.describe(err.get('input'))}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", '"')
        return f"must be {expected}, not {_shown(err.get('input'))}"
    if kind in ("string_too_short", "too_short"):
        return "must not be empty"
    if kind == "value_error":
        return str(ctx.get("error") or err["msg"])
    return str(err["msg"]).lower()


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(_cut(value), ensure_ascii=False)
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    return jsontype.describe(value)


def _field_error(path: str, err: ErrorDetails) -> FieldError:
    if err["type"] == "missing":
        return FieldError(path, ErrorType.REQUIRED)
    value = err.get("input")
    problem = _problem(err)
    if isinstance(value, str):
        return FieldError(path, ErrorType.INVALID, _cut(value), problem)
    if value is None or isinstance(value, bool | int | float):
        return FieldError(path, ErrorType.INVALID, value, problem)
    return FieldError(path, ErrorType.INVALID, detail=problem)  # an object or list: its type says enough


def _listing(items: Sequence[str]) -> str:
    shown = "; ".join(items[:MAX_LISTED_ERRORS])
    more = len(items) - MAX_LISTED_ERRORS
    return shown + (f"; and {more} more" if more > 0 else "")


# --- the HTTP face of an AdmissionReview endpoint ------------------------------------------

class Unavailable(Exception):
    """The answer depends on something that cannot be read now: HTTP 503 with this message,
    and the webhook's failurePolicy decides."""


def json_response(document: Any, status: int = 200) -> Response:
    """A starlette Response of `document` as ASCII JSON (`encode`)."""
    from starlette.responses import Response

    return Response(encode(document), status_code=status, media_type="application/json")


async def answer(request: Request,
                 decide: Callable[[AdmissionReview], Awaitable[Any]]) -> Response:
    """The HTTP face of an AdmissionReview endpoint: the body parsed at the edge, `decide`d,
    and answered (the status codes are in the module docstring)."""
    try:
        review = parse(await request.body())
        return json_response(await decide(review))
    except BadReview as exc:
        return json_response({"detail": str(exc)}, 400)
    except Unavailable as exc:
        return json_response({"detail": str(exc)}, 503)


__all__ = [
    "API_VERSION",
    "AdmissionRequest",
    "AdmissionReview",
    "BadReview",
    "GroupVersionKind",
    "InvalidPod",
    "Pod",
    "Unavailable",
    "UserInfo",
    "allowed",
    "answer",
    "decode",
    "encode",
    "json_response",
    "name_of",
    "parse",
    "read_pod",
    "refused",
    "request_of",
    "review_of",
]
