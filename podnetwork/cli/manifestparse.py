"""Manifest text to documents: YAML as Kubernetes reads it, and JSON, within `Limits`.

YAML is read as Kubernetes reads it (sigs.k8s.io/yaml): timestamps stay strings,
values are JSON values (other tags such as `!!binary` are refused), and a key
repeated in one mapping is an error (keys merged in with `<<` may be overridden).
Aliases may not expand beyond `max_alias_nodes`, nor documents nest beyond
`max_depth`, both checked while the parser composes the document, before anything
is built from it.

libyaml parses when it is installed; it only turns text into events: composing,
the guards and the building of values are the same Python code either way, and a
syntax error is worded by the pure-Python parser (`parse_yaml`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml
import yaml.composer
import yaml.constructor
import yaml.parser
import yaml.reader
import yaml.resolver
import yaml.scanner

from podnetwork.cli.manifestlimits import Limits, ManifestError, YAMLParser
from podnetwork.ground import excerpts

try:
    from yaml._yaml import CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    LIBYAML_AVAILABLE = False
else:
    LIBYAML_AVAILABLE = True


# --- YAML: one composer, one constructor, two parsers -------------------------------------------

_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_VALUE = "tag:yaml.org,2002:value"
_YAML_TAG_PREFIX = "tag:yaml.org,2002:"

#: A Kubernetes number is a 64-bit integer; anything wider is refused, not rounded.
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1


class _Refused(yaml.MarkedYAMLError):
    """Input the reader will not use: `invalid` YAML (a repeated key, an alias to no
    anchor), or valid YAML beyond a limit or with a value Kubernetes has no type for.
    Reported as `[invalid YAML at ]line L column C: problem`."""

    def __init__(self, problem: str, mark: Any, *, invalid: bool = False, limit: bool = False) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.invalid = invalid
        self.limit = limit
        """One of `Limits` was reached: found at the same event whichever parser runs."""


class _Resolver(yaml.resolver.Resolver):
    """YAML 1.1 plain scalars as Kubernetes reads them: timestamps and `=` stay strings."""


_Resolver.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_TIMESTAMP, _VALUE)]
    for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
}


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix(_YAML_TAG_PREFIX) if tag.startswith(_YAML_TAG_PREFIX) else tag


class _Composer(yaml.composer.Composer):
    """PyYAML's composer with the guards of `Limits`, for either parser.

    Alias bombs and deep nesting cost nothing while composing: an alias is a
    reference to a node already composed. They explode later, in whatever walks
    the object as a tree (validators, JSON, printing). So every node's size and
    height, aliases expanded, are counted here, as the events arrive, and the
    input is refused at the first event that goes beyond a limit.
    """

    if TYPE_CHECKING:  # supplied by the parser and the resolver it is mixed with

        def get_event(self) -> Any: ...
        def check_event(self, *choices: type[yaml.Event]) -> bool: ...
        def resolve(self, kind: type[yaml.Node], value: str | None, implicit: Any) -> str: ...

    def __init__(self, limits: Limits) -> None:
        yaml.composer.Composer.__init__(self)
        self.limits = limits
        self.alias_nodes = 0
        """Nodes the aliases of this input stand for (the budget spans documents)."""
        self._depth = 0
        self._expanded: dict[str, tuple[int, int]] = {}
        """anchor -> (nodes, height) of its node with aliases expanded."""
        self._open: set[str] = set()
        """Anchors whose node is still being composed: an alias to one is a cycle."""

    def compose_document(self) -> yaml.Node:
        self.get_event()  # DocumentStart
        node, _, _ = self._compose()
        self.get_event()  # DocumentEnd
        self.anchors = {}
        self._expanded = {}
        return node

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        return self._compose()[0]

    def _too_deep(self, mark: Any) -> _Refused:
        return _Refused(
            f"nested more than {self.limits.max_depth} levels deep (counting what aliases "
            "expand to); no Kubernetes object is this deep: check the brackets and the indentation",
            mark,
            limit=True,
        )

    def _compose(self) -> tuple[yaml.Node, int, int]:
        """The next node, how many nodes it stands for, and how many collections deep it is."""
        event = self.get_event()
        if isinstance(event, yaml.AliasEvent):
            return self._alias(event)
        anchor = event.anchor
        if anchor is not None and anchor in self.anchors:
            first = self.anchors[anchor].start_mark.line + 1
            raise _Refused(
                f"anchor &{excerpts.cut(anchor)} is defined again (first at line {first}); "
                "give each anchor its own name",
                event.start_mark,
            )
        node: yaml.Node
        if isinstance(event, yaml.ScalarEvent):
            tag = event.tag
            if tag is None or tag == "!":
                tag = self.resolve(yaml.ScalarNode, event.value, event.implicit)
            start: Any = event.start_mark  # a libyaml Mark or a PyYAML one: the same fields
            end: Any = event.end_mark
            node = yaml.ScalarNode(tag, event.value, start, end, style=event.style)
            if anchor is not None:
                self.anchors[anchor] = node
                self._expanded[anchor] = (1, 0)
            return node, 1, 0
        if self._depth >= self.limits.max_depth:
            raise self._too_deep(event.start_mark)
        is_seq = isinstance(event, yaml.SequenceStartEvent)
        kind: type[yaml.SequenceNode | yaml.MappingNode] = yaml.SequenceNode if is_seq else yaml.MappingNode
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolve(kind, None, event.implicit)
        node = kind(tag, [], event.start_mark, None, flow_style=event.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
            self._open.add(anchor)
        self._depth += 1
        nodes, height = 1, 0
        end = yaml.SequenceEndEvent if is_seq else yaml.MappingEndEvent
        while not self.check_event(end):
            child, n, h = self._compose()
            if is_seq:
                node.value.append(child)
            else:
                value, n_value, h_value = self._compose()
                node.value.append((child, value))
                n, h = n + n_value, max(h, h_value)
            nodes, height = nodes + n, max(height, h)
        node.end_mark = self.get_event().end_mark
        self._depth -= 1
        if anchor is not None:
            self._open.discard(anchor)
            self._expanded[anchor] = (nodes, height + 1)
        return node, nodes, height + 1

    def _alias(self, event: yaml.AliasEvent) -> tuple[yaml.Node, int, int]:
        anchor = str(event.anchor)
        name = excerpts.cut(anchor)
        if anchor not in self.anchors:
            raise _Refused(
                f"alias *{name} names no anchor &{name} defined before it in this document; "
                "define the anchor first, or write the value out",
                event.start_mark,
                invalid=True,
            )
        if anchor in self._open:
            raise _Refused(
                f"alias *{name} is inside the node of its own anchor &{name}, so the object "
                "would contain itself; remove the alias",
                event.start_mark,
            )
        nodes, height = self._expanded[anchor]
        self.alias_nodes += nodes
        if self.alias_nodes > self.limits.max_alias_nodes:
            raise _Refused(
                f"YAML aliases here expand the input to more than {self.limits.max_alias_nodes} "
                "nodes beyond what is written (an alias bomb?); aliases may repeat small blocks, "
                "not build large ones: write the values out, or split the file",
                event.start_mark,
                limit=True,
            )
        if self._depth + height > self.limits.max_depth:
            raise self._too_deep(event.start_mark)
        return self.anchors[anchor], nodes, height


class _Constructor(yaml.constructor.SafeConstructor):
    """JSON values only, as Kubernetes objects are JSON, and no duplicate keys."""

    def construct_undefined(self, node: yaml.Node) -> Any:
        raise _Refused(
            f"the tag {excerpts.cut(_short_tag(str(node.tag)))} is not supported: Kubernetes "
            "objects hold strings, numbers, booleans, null, lists and mappings; remove the tag "
            "(quote the value to keep it as a string)",
            node.start_mark,
        )

    def construct_kube_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node))
        value = _yaml_int(text)
        if value is None:
            raise _Refused(
                f"{excerpts.value(text)} is not an integer; write one, or drop the !!int tag", node.start_mark
            )
        if not _INT_MIN <= value <= _INT_MAX:
            raise _Refused(
                f"the integer {excerpts.cut(text)} does not fit in 64 bits; quote it to make it a string",
                node.start_mark,
            )
        return value

    def construct_kube_float(self, node: yaml.ScalarNode) -> float:
        try:
            return float(yaml.constructor.SafeConstructor.construct_yaml_float(self, node))
        except (ValueError, IndexError):
            text = str(self.construct_scalar(node))
            raise _Refused(
                f"{excerpts.value(text)} is not a number; write one, or drop the !!float tag", node.start_mark
            ) from None

    def construct_kube_bool(self, node: yaml.ScalarNode) -> bool:
        text = str(self.construct_scalar(node))
        value = self.bool_values.get(text.lower())
        if value is None:
            raise _Refused(
                f"{excerpts.value(text)} is not a boolean; write true or false, or drop the !!bool tag",
                node.start_mark,
            )
        return bool(value)

    def construct_merge_scalar(self, node: yaml.ScalarNode) -> str:
        # `<<` is a merge only as a key; as a value it is the string Kubernetes sees.
        return str(self.construct_scalar(node))

    def construct_kube_mapping(self, node: yaml.MappingNode) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise _Refused(
                    "a mapping key must be a scalar (a string), not a list or mapping",
                    key_node.start_mark,
                    invalid=True,
                ) from None
            if key in seen:
                raise _Refused(
                    f"mapping key {excerpts.value(key)} already defined; keep one of them",
                    key_node.start_mark,
                    invalid=True,
                )
            seen.add(key)
        # Keys merged in with `<<` come first, so the mapping's own keys override them.
        self.flatten_mapping(node)
        return self.construct_mapping(node, deep=True)


_Constructor.yaml_constructors = {
    _NULL: yaml.constructor.SafeConstructor.construct_yaml_null,
    _BOOL: _Constructor.construct_kube_bool,
    _INT: _Constructor.construct_kube_int,
    _FLOAT: _Constructor.construct_kube_float,
    _STR: yaml.constructor.SafeConstructor.construct_yaml_str,
    _SEQ: yaml.constructor.SafeConstructor.construct_yaml_seq,
    _MAP: _Constructor.construct_kube_mapping,
    _MERGE: _Constructor.construct_merge_scalar,
    None: _Constructor.construct_undefined,
}
_Constructor.yaml_multi_constructors = {}


def _yaml_int(text: str) -> int | None:
    """A YAML 1.1 integer (`0x1F`, `0o17`-style `017`, `0b1`, `1_000`, `1:30`), or None.

    As PyYAML reads them, but never computing a number of more than ~100 digits:
    Python refuses to convert those, and sexagesimal ones cost quadratic time."""
    value = text.replace("_", "")
    sign = -1 if value.startswith("-") else 1
    value = value[1:] if value[:1] in ("-", "+") else value
    if not value or len(value) > 100:
        return None if not value else _INT_MAX + 1
    try:
        if value == "0":
            return 0
        if value.startswith("0b"):
            return sign * int(value[2:], 2)
        if value.startswith("0x"):
            return sign * int(value[2:], 16)
        if value.startswith("0"):
            return sign * int(value, 8)
        if ":" in value:
            number = 0
            for part in value.split(":"):
                number = number * 60 + int(part)
            return sign * number
        return sign * int(value, 10)
    except ValueError:
        return None


class _PythonLoader(
    yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, _Composer, _Constructor, _Resolver
):
    def __init__(self, text: str, limits: Limits) -> None:
        yaml.reader.Reader.__init__(self, text)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        _Composer.__init__(self, limits)
        _Constructor.__init__(self)
        _Resolver.__init__(self)


if LIBYAML_AVAILABLE:

    class _LibyamlLoader(_Composer, CParser, _Constructor, _Resolver):
        # _Composer first: libyaml only produces the events; composing stays ours.
        def __init__(self, text: str, limits: Limits) -> None:
            CParser.__init__(self, text)
            _Composer.__init__(self, limits)
            _Constructor.__init__(self)
            _Resolver.__init__(self)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return (
            f"invalid YAML at character {exc.position + 1}: character U+{code:04X} is not allowed "
            "(YAML allows no control characters, lone surrogates, U+FFFE or U+FFFF); remove it"
        )
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark else ""
        if isinstance(exc, _Refused):
            where = f"invalid YAML at {where}" if exc.invalid else where
            return f"{where}: {exc.problem}" if where else str(exc.problem)
        what = exc.problem or exc.context or "syntax error"
        if exc.context and exc.problem:
            what = f"{exc.problem} ({exc.context})"
        return f"invalid YAML at {where}: {what}" if where else f"invalid YAML: {what}"
    return f"invalid YAML: {exc}"


@dataclass
class Parsed:
    documents: list[tuple[int, int, Any]]
    """(document number, start line, data) of each non-null document, in order."""
    error: ManifestError | None = None
    parser_bound: bool = False
    """The error's wording or place may depend on the parser: a syntax error (libyaml
    and PyYAML word them differently), or one marked at an empty value (whose column
    they place differently). Every error but a limit's."""


def _run_loader(make: Any, text: str, limits: Limits, label: str) -> Parsed:
    out = Parsed([])
    try:
        loader = make(text, limits)
    except yaml.YAMLError as exc:  # PyYAML's reader refuses control characters up front
        return Parsed([], ManifestError(f"{label}:doc 1", _yaml_problem(exc)), parser_bound=True)
    number = 0
    try:
        while True:
            try:
                if not loader.check_node():
                    return out
                node = loader.get_node()
            except yaml.YAMLError as exc:
                out.error = ManifestError(f"{label}:doc {number + 1}", _yaml_problem(exc))
                out.parser_bound = not (isinstance(exc, _Refused) and exc.limit)
                return out
            except RecursionError:  # pragma: no cover - max_depth keeps composing shallow
                out.error = ManifestError(f"{label}:doc {number + 1}", "nested too deeply")
                return out
            number += 1
            try:
                data = loader.construct_document(node)
            except yaml.YAMLError as exc:
                out.error = ManifestError(f"{label}:doc {number}", _yaml_problem(exc))
                out.parser_bound = True
                return out
            except RecursionError:  # pragma: no cover - max_depth keeps building shallow
                out.error = ManifestError(f"{label}:doc {number}", "nested too deeply")
                return out
            out.documents.append((number, node.start_mark.line + 1, data))
    finally:
        loader.dispose()


def parse_yaml(text: str, label: str, limits: Limits, parser: YAMLParser) -> Parsed:
    if parser == YAMLParser.LIBYAML and not LIBYAML_AVAILABLE:
        raise RuntimeError("libyaml is not available: PyYAML was built without it")
    if parser == YAMLParser.PYTHON or not LIBYAML_AVAILABLE:
        return _run_loader(_PythonLoader, text, limits, label)
    try:
        text.encode("utf-8")  # libyaml takes UTF-8; a lone surrogate is PyYAML's to report
    except UnicodeEncodeError:
        return _run_loader(_PythonLoader, text, limits, label)
    fast = _run_loader(_LibyamlLoader, text, limits, label)
    if fast.error is None or not fast.parser_bound:
        return fast
    # Errors are worded by the pure-Python parser, so a message does not depend on
    # whether libyaml is installed. Only if it finds the problem in the same document:
    # elsewhere would be one of the few spots where it is stricter than libyaml (and
    # than Kubernetes): a tab after a value, `|#`, a tag glued to `,` (docs/api.md).
    reference = _run_loader(_PythonLoader, text, limits, label)
    if reference.error is not None and reference.error.source == fast.error.source:
        return Parsed(fast.documents, reference.error, parser_bound=True)
    return fast


def _json_number(text: str) -> int:
    value = int(text) if len(text) <= 21 else _INT_MAX + 1
    if not _INT_MIN <= value <= _INT_MAX:
        raise ValueError(
            f"the integer {excerpts.cut(text)} does not fit in 64 bits; quote it to make it a string"
        )
    return value


def _json_depth_ok(data: Any, limit: int) -> bool:
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth >= limit:
                return False
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return True


def parse_json(text: str, label: str, limits: Limits) -> Parsed:
    def refuse(problem: str) -> Parsed:
        return Parsed([], ManifestError(f"{label}:doc 1", problem))

    too_deep = (
        f"nested more than {limits.max_depth} levels deep; no Kubernetes object is this deep: "
        "check the brackets"
    )
    try:
        data = json.loads(text, parse_int=_json_number)
    except json.JSONDecodeError as exc:
        return refuse(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
    except RecursionError:
        return refuse(too_deep)
    except ValueError as exc:
        return refuse(f"invalid JSON: {exc}")
    if not _json_depth_ok(data, limits.max_depth):
        return refuse(too_deep)
    return Parsed([(1, 1, data)])


__all__ = ["LIBYAML_AVAILABLE", "Parsed", "parse_json", "parse_yaml"]
