"""MultiNetworkPolicy as the ecosystem writes it: `k8s.cni.cncf.io/v1beta1`, NetworkPolicy's spec.

The models declare the fields of `networking.k8s.io/v1` NetworkPolicySpec under their wire
names (aliases; Python names are accepted too). `parse_policy` is where a policy enters the
program (a watch event, an API response, a file): it checks the shape with pydantic, then
what the API server checks for a NetworkPolicy (`ValidateNetworkPolicySpec`: selectors,
CIDRs, `except`, ports, `endPort`, `policyTypes`), and raises `PolicyError` naming every
field that does not fit. A parsed policy is therefore always usable by the scope, the
evaluator and the rule compiler: none of them meets a malformed value.

Defaulting is NetworkPolicy's (`effective_policy_types`): with no `policyTypes`, a policy
is of type Ingress, and also Egress when it has at least one egress rule.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from podnetwork.ground import constants, excerpts, fielderrors, jsontype
from podnetwork.ground.core import ObjectMeta
from podnetwork.ground.fielderrors import FieldError, InvalidObject

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

PORT_MIN, PORT_MAX = 1, 65535
#: IANA_SVC_NAME (RFC 6335 5.1), the rule of a container port's name and so of a named port.
PORT_NAME_MAX = 15
_PORT_NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
#: A label key's name part and a label value (apimachinery `validation.IsQualifiedName`).
LABEL_NAME_MAX = 63
_LABEL_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class Protocol(StrEnum):
    """The protocols a NetworkPolicy port may name (`v1.Protocol`, case-sensitive)."""

    TCP = "TCP"
    UDP = "UDP"
    SCTP = "SCTP"


class PolicyType(StrEnum):
    INGRESS = "Ingress"
    EGRESS = "Egress"


class Operator(StrEnum):
    """Label selector operators (`metav1.LabelSelectorOperator`)."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class PolicyError(InvalidObject):
    """A MultiNetworkPolicy that cannot be used; `errors` name every bad field, API-server style."""


class _Model(BaseModel):
    # Unknown keys are refused, as the API server's strict field validation does: a typo such
    # as `namespaceSelectr` would otherwise silently narrow a peer to the policy's namespace.
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)


_RANGE = f"must be between {PORT_MIN} and {PORT_MAX}, inclusive"


def _is_int(value: Any) -> bool:
    """A JSON number without fraction; not a boolean, which Python counts as an int."""
    return isinstance(value, int) and not isinstance(value, bool)


def _plain_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {jsontype.describe(value)}")
    return value


class LabelSelectorRequirement(_Model):
    key: str
    operator: Operator
    values: tuple[str, ...] | None = None

    @field_validator("key", mode="plain")
    @classmethod
    def _key(cls, value: Any) -> str:
        return _plain_str(value)

    @field_validator("operator", mode="plain")
    @classmethod
    def _operator(cls, value: Any) -> Operator:
        if isinstance(value, str) and value in Operator.__members__.values():
            return Operator(value)
        raise ValueError(
            f"unknown operator {excerpts.value(value)}: must be one of {', '.join(o.value for o in Operator)}"
        )

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator is Operator.EXISTS:
            return self.key in labels
        if self.operator is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        inside = self.key in labels and labels[self.key] in (self.values or ())
        return inside if self.operator is Operator.IN else not inside


class LabelSelector(_Model):
    """`metav1.LabelSelector`: every `matchLabels` pair and every requirement must hold; empty matches all."""

    match_labels: dict[str, str] | None = Field(None, alias="matchLabels", strict=True)
    match_expressions: tuple[LabelSelectorRequirement, ...] | None = Field(None, alias="matchExpressions")

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in (self.match_labels or {}).items():
            if labels.get(key) != value:
                return False
        return all(r.matches(labels) for r in self.match_expressions or ())

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions


class IPBlock(_Model):
    """A CIDR and the CIDRs inside it that it leaves out (`except`, Python name `except_`)."""

    cidr: str
    except_: tuple[str, ...] | None = Field(None, alias="except")

    @field_validator("cidr", mode="plain")
    @classmethod
    def _cidr(cls, value: Any) -> str:
        return _plain_str(value)

    def network(self) -> IPNetwork:
        """The CIDR, host bits cleared (`10.0.0.1/24` is `10.0.0.0/24`, as Go's ParseCIDR reads it)."""
        return ipaddress.ip_network(self.cidr, strict=False)

    def excepted(self) -> tuple[IPNetwork, ...]:
        return tuple(ipaddress.ip_network(c, strict=False) for c in self.except_ or ())

    def contains(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        net = self.network()
        if address.version != net.version or address not in net:
            return False
        return not any(address in e for e in self.excepted())


class PolicyPeer(_Model):
    """One peer: pods by selectors (`podSelector`, `namespaceSelector`, or both: AND), or an `ipBlock`."""

    pod_selector: LabelSelector | None = Field(None, alias="podSelector")
    namespace_selector: LabelSelector | None = Field(None, alias="namespaceSelector")
    ip_block: IPBlock | None = Field(None, alias="ipBlock")


class PolicyPort(_Model):
    """A protocol and a port: a number, a container port's name, or none (every port);
    `endPort` makes a numeric port the start of a range."""

    protocol: Protocol = Protocol.TCP
    port: int | str | None = None
    end_port: int | None = Field(None, alias="endPort")

    @field_validator("protocol", mode="plain")
    @classmethod
    def _protocol(cls, value: Any) -> Protocol:
        if isinstance(value, str) and value in Protocol.__members__.values():
            return Protocol(value)
        raise ValueError(
            f"unknown protocol {excerpts.value(value)}: must be one of "
            f"{', '.join(p.value for p in Protocol)} (upper case)"
        )

    @field_validator("port", mode="plain")
    @classmethod
    def _port(cls, value: Any) -> int | str | None:
        if value is None or isinstance(value, str):
            return value
        if _is_int(value):
            return int(value)
        raise ValueError(f"must be a port number or a container port's name, not {jsontype.describe(value)}")

    @field_validator("end_port", mode="plain")
    @classmethod
    def _end_port(cls, value: Any) -> int | None:
        if value is None:
            return None
        if _is_int(value):
            return int(value)
        raise ValueError(f"must be a port number, not {jsontype.describe(value)}")

    def numeric_range(self) -> tuple[int, int] | None:
        """`(first, last)` for a numeric port (with `endPort`, its range); None for a name or no port."""
        if isinstance(self.port, int):
            return self.port, self.end_port if self.end_port is not None else self.port
        return None


class IngressRule(_Model):
    """Traffic from any of `from` (all sources when empty or absent) to any of `ports` (all when empty)."""

    ports: tuple[PolicyPort, ...] | None = None
    from_: tuple[PolicyPeer, ...] | None = Field(None, alias="from")

    @property
    def peers(self) -> tuple[PolicyPeer, ...]:
        return self.from_ or ()


class EgressRule(_Model):
    """Traffic to any of `to` (all destinations when empty or absent) on any of `ports` (all when empty)."""

    ports: tuple[PolicyPort, ...] | None = None
    to: tuple[PolicyPeer, ...] | None = None

    @property
    def peers(self) -> tuple[PolicyPeer, ...]:
        return self.to or ()


Rule = IngressRule | EgressRule


class MultiNetworkPolicySpec(_Model):
    pod_selector: LabelSelector = Field(..., alias="podSelector")
    policy_types: tuple[PolicyType, ...] | None = Field(None, alias="policyTypes")
    ingress: tuple[IngressRule, ...] | None = None
    egress: tuple[EgressRule, ...] | None = None

    @field_validator("policy_types", mode="before")
    @classmethod
    def _policy_types(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            for item in value:
                if not (isinstance(item, str) and item in PolicyType.__members__.values()):
                    raise ValueError(
                        f"unknown policy type {excerpts.value(item)}: must be "
                        f"{' or '.join(t.value for t in PolicyType)}"
                    )
        return value

    def effective_policy_types(self) -> frozenset[PolicyType]:
        """NetworkPolicy's defaulting: the given types, else Ingress, plus Egress with an egress rule."""
        if self.policy_types:
            return frozenset(self.policy_types)
        if self.egress:
            return frozenset({PolicyType.INGRESS, PolicyType.EGRESS})
        return frozenset({PolicyType.INGRESS})


class MultiNetworkPolicy(BaseModel):
    """`k8s.cni.cncf.io/v1beta1` MultiNetworkPolicy. `metadata.namespace` is always set once parsed."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    api_version: str = Field(constants.POLICY_API_VERSION, alias="apiVersion")
    kind: str = constants.POLICY_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: MultiNetworkPolicySpec

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or ""

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def key(self) -> str:
        """`namespace/name`: how logs, findings and rule comments name the policy."""
        return f"{self.namespace}/{self.name}"

    def rules(self, direction: PolicyType) -> tuple[Rule, ...]:
        """The rules of one direction, if the policy is of that type (else none: a policy of type
        Ingress only ignores its `egress` rules, as NetworkPolicy does)."""
        if direction not in self.spec.effective_policy_types():
            return ()
        return (self.spec.ingress or ()) if direction is PolicyType.INGRESS else (self.spec.egress or ())


# --- Checks the API server makes (ValidateNetworkPolicySpec), written once -------------------


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a qualified label key (`[prefix/]name`), or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "prefix part must be non-empty"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(prefix)):
        return "prefix part must be a lower-case DNS subdomain of at most 253 characters"
    return label_value_problem(name, what="name part", empty_ok=False)


def label_value_problem(value: str, *, what: str = "a label value", empty_ok: bool = True) -> str | None:
    if value == "":
        return None if empty_ok else f"{what} must be non-empty"
    if len(value) > LABEL_NAME_MAX or not _LABEL_NAME_RE.fullmatch(value):
        return (
            f"{what} must be at most {LABEL_NAME_MAX} characters of alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def port_name_problem(name: str) -> str | None:
    """Why `name` is not an IANA service name (a container port's name), or None."""
    if name.isdigit():
        return "a numeric port is written as a number, without quotes"
    if len(name) > PORT_NAME_MAX:
        return f"a port name must be at most {PORT_NAME_MAX} characters"
    if not _PORT_NAME_RE.fullmatch(name) or "--" in name:
        return (
            "a port name must be lower-case alphanumerics and '-', start and end with an "
            "alphanumeric, and not hold '--'"
        )
    if not any(c.isalpha() for c in name):
        return "a port name must contain at least one letter"
    return None


def _selector_errors(selector: LabelSelector, path: str) -> Iterator[FieldError]:
    for key, value in (selector.match_labels or {}).items():
        if problem := label_key_problem(key):
            yield fielderrors.invalid(f"{path}.matchLabels", key, problem)
        if problem := label_value_problem(value):
            yield fielderrors.invalid(f"{path}.matchLabels[{key}]", value, problem)
    for i, req in enumerate(selector.match_expressions or ()):
        at = f"{path}.matchExpressions[{i}]"
        if problem := label_key_problem(req.key):
            yield fielderrors.invalid(f"{at}.key", req.key, problem)
        if req.operator in (Operator.IN, Operator.NOT_IN):
            if not req.values:
                detail = f"must be non-empty with operator {req.operator.value}"
                yield fielderrors.required(f"{at}.values", detail)
            for j, value in enumerate(req.values or ()):
                if problem := label_value_problem(value):
                    yield fielderrors.invalid(f"{at}.values[{j}]", value, problem)
        elif req.values:
            yield fielderrors.forbidden(f"{at}.values", f"must be empty with operator {req.operator.value}")


def _cidr_problem(text: str) -> str | None:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return "must be a CIDR such as 10.0.0.0/16 or fd00::/64"
    if "/" not in text:
        return "must be a CIDR with a prefix length, such as 10.0.0.0/16 or 10.0.0.1/32"
    return None


def _ip_block_errors(block: IPBlock, path: str) -> Iterator[FieldError]:
    if problem := _cidr_problem(block.cidr):
        yield fielderrors.invalid(f"{path}.cidr", block.cidr, problem)
        return
    outer = block.network()
    for i, text in enumerate(block.except_ or ()):
        at = f"{path}.except[{i}]"
        if not isinstance(text, str) or (problem := _cidr_problem(text)):
            yield fielderrors.invalid(at, text, "must be a CIDR such as 10.0.1.0/24")
            continue
        inner = ipaddress.ip_network(text, strict=False)
        if inner.version != outer.version or not inner.subnet_of(outer) or inner.prefixlen <= outer.prefixlen:  # type: ignore[arg-type]
            yield fielderrors.invalid(at, text, f"must be a strict subset of cidr {block.cidr}")


def _peer_errors(peer: PolicyPeer, path: str) -> Iterator[FieldError]:
    selectors = peer.pod_selector is not None or peer.namespace_selector is not None
    if peer.ip_block is not None and selectors:
        yield fielderrors.forbidden(path, "may not specify both ipBlock and another peer")
    elif peer.ip_block is None and not selectors:
        yield fielderrors.required(path, "must specify a peer: podSelector, namespaceSelector or ipBlock")
    if peer.pod_selector is not None:
        yield from _selector_errors(peer.pod_selector, f"{path}.podSelector")
    if peer.namespace_selector is not None:
        yield from _selector_errors(peer.namespace_selector, f"{path}.namespaceSelector")
    if peer.ip_block is not None:
        yield from _ip_block_errors(peer.ip_block, f"{path}.ipBlock")


def _port_errors(port: PolicyPort, path: str) -> Iterator[FieldError]:
    if isinstance(port.port, int) and not PORT_MIN <= port.port <= PORT_MAX:
        yield fielderrors.invalid(f"{path}.port", port.port, _RANGE)
    elif isinstance(port.port, str) and (problem := port_name_problem(port.port)):
        yield fielderrors.invalid(f"{path}.port", port.port, problem)
    if port.end_port is None:
        return
    if not isinstance(port.port, int):
        yield fielderrors.required(f"{path}.port", "endPort needs a numeric port, the range's first")
    elif port.end_port < port.port:
        yield fielderrors.invalid(f"{path}.endPort", port.end_port, "must be greater than or equal to port")
    if not PORT_MIN <= port.end_port <= PORT_MAX:
        yield fielderrors.invalid(f"{path}.endPort", port.end_port, _RANGE)


def _rule_errors(rules: Sequence[Rule], path: str, peers_key: str) -> Iterator[FieldError]:
    for i, rule in enumerate(rules):
        for j, port in enumerate(rule.ports or ()):
            yield from _port_errors(port, f"{path}[{i}].ports[{j}]")
        for j, peer in enumerate(rule.peers):
            yield from _peer_errors(peer, f"{path}[{i}].{peers_key}[{j}]")


def spec_errors(spec: MultiNetworkPolicySpec, path: str = "spec") -> list[FieldError]:
    """What the API server's NetworkPolicy validation refuses in a spec that has the right shape."""
    errors = list(_selector_errors(spec.pod_selector, f"{path}.podSelector"))
    errors += _rule_errors(spec.ingress or (), f"{path}.ingress", "from")
    errors += _rule_errors(spec.egress or (), f"{path}.egress", "to")
    types = spec.policy_types or ()
    if len(set(types)) != len(types):
        shown = [t.value for t in types]
        errors.append(fielderrors.invalid(f"{path}.policyTypes", shown, "must not repeat a type"))
    return errors


def _path(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _from_pydantic(exc: ValidationError) -> list[FieldError]:
    errors = []
    for err in exc.errors(include_url=False):
        path = _path(err["loc"])
        if err["type"] == "missing":
            errors.append(fielderrors.required(path))
        elif err["type"] == "extra_forbidden":
            errors.append(fielderrors.forbidden(path, "unknown field"))
        else:
            message = str(err["msg"]).removeprefix("Value error, ")
            errors.append(fielderrors.invalid(path, err.get("input"), message))
    return errors


def parse_policy(obj: Any, namespace: str | None = None) -> MultiNetworkPolicy:
    """A MultiNetworkPolicy from its JSON form (a decoded object, API server style).

    `namespace` is used when the object has none (a manifest file). Raises `PolicyError`
    listing every field that is wrong, each with its path (`spec.ingress[0].from[1].ipBlock.cidr`).
    Never raises anything else, whatever `obj` holds.
    """
    if not isinstance(obj, Mapping):
        detail = f"must be an object, not {jsontype.describe(obj)}"
        raise PolicyError([fielderrors.invalid("<object>", obj, detail)])
    errors: list[FieldError] = []
    for key, want in (("apiVersion", constants.POLICY_API_VERSION), ("kind", constants.POLICY_KIND)):
        if key in obj and obj[key] != want:
            errors.append(fielderrors.invalid(key, obj[key], f"must be {want}"))
    try:
        policy = MultiNetworkPolicy.model_validate(obj)
    except ValidationError as exc:
        raise PolicyError(errors + _from_pydantic(exc)) from None
    except (RecursionError, TypeError) as exc:  # pragma: no cover - pathological nesting
        unreadable = fielderrors.invalid("<object>", "...", f"cannot be read: {exc}")
        raise PolicyError([*errors, unreadable]) from None
    errors += spec_errors(policy.spec)
    if not policy.metadata.namespace:
        if namespace:
            metadata = policy.metadata.model_copy(update={"namespace": namespace})
            policy = policy.model_copy(update={"metadata": metadata})
        else:
            errors.append(fielderrors.required("metadata.namespace", "a MultiNetworkPolicy is namespaced"))
    if errors:
        raise PolicyError(errors)
    return policy


__all__ = [
    "PORT_MAX",
    "PORT_MIN",
    "EgressRule",
    "IPBlock",
    "IPNetwork",
    "IngressRule",
    "LabelSelector",
    "LabelSelectorRequirement",
    "MultiNetworkPolicy",
    "MultiNetworkPolicySpec",
    "Operator",
    "PolicyError",
    "PolicyPeer",
    "PolicyPort",
    "PolicyType",
    "Protocol",
    "Rule",
    "label_key_problem",
    "label_value_problem",
    "parse_policy",
    "port_name_problem",
    "spec_errors",
]
