"""Kubernetes manifests from files, directories and stdin, as plain dicts.

The one reader of manifest files: every command that takes `-f` (`validate`,
`explain`, `graph`, `migrate`) and `migrate --rollback PLAN` read through it,
so they share its guards. What `kubectl apply -f` accepts is accepted here:
YAML or JSON, several documents per file separated by `---`, `List` objects
(`kind: List`, `PodList`, ...) whose `items` are flattened, and `-` for stdin. A
directory contributes its `*.yaml`, `*.yml` and `*.json` files in name order,
not its subdirectories unless `recursive=True` (like `kubectl -f DIR` without
`-R`).

Each object comes back as a `Document` whose `source` names where it came from
(`examples/pods.yaml:doc 2`), so every later message can point at it. Input that
cannot be a Kubernetes object is a `ManifestError` whose text is one line
naming the file, the document and, where known, the line and column.

YAML is read as Kubernetes reads it (sigs.k8s.io/yaml): timestamps stay
strings (`lastTransitionTime: 2024-01-01T00:00:00Z` is not a datetime), values
are JSON values (strings, numbers, booleans, null, lists, mappings; other tags
such as `!!binary` are refused), and a key repeated in one mapping is an error
rather than silently last-one-wins (keys merged in with `<<` may be overridden).

Hostile input is refused, never half-processed (`Limits`): only regular files
are read (a FIFO or a device would hang or flood the reader), each at most
`max_file_bytes`; a directory reached twice through symbolic links is walked
once; aliases may not expand beyond `max_alias_nodes` ("billion laughs"), nor
documents nest beyond `max_depth`, both checked while the parser composes the
document, before anything is built from it.

libyaml parses when it is installed (about five times faster than PyYAML's
pure-Python parser on large files). It only turns text into events: composing,
the guards and the building of values are the same Python code either way, and
a syntax error is worded by the pure-Python parser, so documents and messages do
not depend on which one is installed, except where PyYAML's scanner is stricter
than libyaml and Kubernetes (a tab after a value, `|#`, `!!null,`): docs/api.md
lists them.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml
import yaml.composer
import yaml.constructor
import yaml.parser
import yaml.reader
import yaml.resolver
import yaml.scanner

from podnetwork.ground import excerpts

try:
    from yaml._yaml import CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    LIBYAML_AVAILABLE = False
else:
    LIBYAML_AVAILABLE = True

STDIN = "-"
STDIN_LABEL = "<stdin>"
EXTENSIONS = (".yaml", ".yml", ".json")

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class Limits:
    """How much one input may ask of the reader. Beyond a limit the input is
    refused with a message naming the limit; nothing of it is used."""

    max_file_bytes: int = 4 * MiB
    """Largest file, or standard input, read, in bytes: 4 MiB. Kubernetes stores an
    object of at most about 1.5 MiB (etcd's request size), so this holds two of
    the largest or thousands of ordinary ones; `--max-file-size` raises it."""
    max_alias_nodes: int = 10_000
    """Nodes that YAML aliases (`*name`, also in `<<: *name` merges) may add to one
    file or stdin, counted as if each alias were replaced by a copy of its anchor's
    node: 10,000. An alias bomb ("billion laughs") is 9 anchors of 9 aliases each,
    387 million strings from 300 bytes; real manifests repeat a few small blocks."""
    max_depth: int = 100
    """Deepest nesting of mappings and lists in a document, aliases expanded: 100.
    Kubernetes objects, CRDs' schemas included, stay far below; deeper input would
    exhaust the stack of the parser and of everything that walks the object."""


DEFAULT_LIMITS = Limits()


class ManifestError(ValueError):
    """Input that cannot be read as Kubernetes objects. `str()` is one line."""

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        # One line, whatever the parser said, and bounded, whatever it quoted.
        self.problem = excerpts.cut(" ".join(problem.split()), excerpts.LINE_LIMIT)
        super().__init__(f"{source}: {self.problem}")


class ManifestIOError(ManifestError):
    """The input could not be read at all: missing, not a regular file, too large,
    unreadable. Commands treat it as a usage error (exit status 2)."""


class YAMLParser(StrEnum):
    """Which parser turns YAML text into events; the rest of the reading is shared."""

    AUTO = "auto"
    """libyaml when installed, else PyYAML's pure-Python parser."""
    LIBYAML = "libyaml"
    PYTHON = "python"


@dataclass(frozen=True)
class Document:
    """One Kubernetes object and where it was read."""

    source: str
    """Where it came from: `path:doc N` (1-based), `path:doc N items[i]` inside a List."""
    obj: dict[str, Any]
    """The object as loaded (plain JSON types)."""
    path: str = ""
    """The file, or `<stdin>`."""
    line: int = 0
    """1-based line where the document starts (0 when unknown, e.g. JSON)."""

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def api_version(self) -> str:
        return str(self.obj.get("apiVersion", ""))

    @property
    def group(self) -> str:
        """The API group of `apiVersion` (`""` for the core group `v1`)."""
        return self.api_version.rpartition("/")[0]

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name") or "")

    @property
    def namespace(self) -> str:
        return str((self.obj.get("metadata") or {}).get("namespace") or "")

    @property
    def ref(self) -> str:
        """`namespace/name`, or `name` for objects without a namespace."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass
class Loaded:
    """Everything read from a set of inputs: the objects and the problems found."""

    documents: list[Document] = field(default_factory=list)
    errors: list[ManifestError] = field(default_factory=list)


def size_text(n: int) -> str:
    """`4 MiB (4194304 bytes)`: a byte count as people and `--max-file-size` write it."""
    for unit, factor in (("GiB", MiB * KiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit} ({n} bytes)"
    return f"{n} bytes"


def parse_size(text: str) -> int:
    """`4Mi`, `512Ki`, `1G`, `1000000`: a byte count for `--max-file-size`. Raises ValueError."""
    units = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "ki": KiB, "mi": MiB, "gi": MiB * KiB}
    raw = text.strip().lower().removesuffix("b")
    digits = raw.rstrip("kmgi")
    unit = raw[len(digits) :]
    if not digits.isdigit() or unit not in units or int(digits) < 1:
        raise ValueError(f"{excerpts.cut(text)!r} is not a size; write bytes, or e.g. 512Ki, 8Mi, 1Gi")
    return int(digits) * units[unit]


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """`--max-file-size`, for every command that reads manifest files."""

    def size(text: str) -> int:
        try:
            return parse_size(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parser.add_argument(
        "--max-file-size",
        type=size,
        default=DEFAULT_LIMITS.max_file_bytes,
        metavar="SIZE",
        help="refuse manifest files (and stdin) larger than this, e.g. 16Mi "
        f"(default {size_text(DEFAULT_LIMITS.max_file_bytes).split(' (')[0]})",
    )


def limits_from(args: argparse.Namespace) -> Limits:
    """The `Limits` of the arguments `add_limit_arguments` added."""
    return Limits(max_file_bytes=getattr(args, "max_file_size", DEFAULT_LIMITS.max_file_bytes))


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
class _Parsed:
    documents: list[tuple[int, int, Any]]
    """(document number, start line, data) of each non-null document, in order."""
    error: ManifestError | None = None
    parser_bound: bool = False
    """The error's wording or place may depend on the parser: a syntax error (libyaml
    and PyYAML word them differently), or one marked at an empty value (whose column
    they place differently). Every error but a limit's."""


def _run_loader(make: Any, text: str, limits: Limits, label: str) -> _Parsed:
    out = _Parsed([])
    try:
        loader = make(text, limits)
    except yaml.YAMLError as exc:  # PyYAML's reader refuses control characters up front
        return _Parsed([], ManifestError(f"{label}:doc 1", _yaml_problem(exc)), parser_bound=True)
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


def _parse_yaml(text: str, label: str, limits: Limits, parser: YAMLParser) -> _Parsed:
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
        return _Parsed(fast.documents, reference.error, parser_bound=True)
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


def _parse_json(text: str, label: str, limits: Limits) -> _Parsed:
    def refuse(problem: str) -> _Parsed:
        return _Parsed([], ManifestError(f"{label}:doc 1", problem))

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
    return _Parsed([(1, 1, data)])


# --- documents to objects -----------------------------------------------------------------------


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


def _objects(
    data: Any, source: str, path: str, line: int, errors: list[ManifestError]
) -> Iterator[Document]:
    """Check one document is an object with apiVersion and kind; flatten Lists."""
    if not isinstance(data, dict):
        problem = f"a document must be a Kubernetes object (a mapping), not {_describe(data)}"
        errors.append(ManifestError(source, problem))
        return
    for key in ("apiVersion", "kind"):
        if not isinstance(data.get(key), str) or not data[key]:
            errors.append(
                ManifestError(source, f"not a Kubernetes object: `{key}` is missing or not a string")
            )
            return
    if data["kind"].endswith("List") and "items" in data:
        items = data["items"]
        if items is None:
            return
        if not isinstance(items, list):
            errors.append(ManifestError(source, f"`items` of a {excerpts.cut(data['kind'])} must be a list"))
            return
        for i, item in enumerate(items):
            yield from _objects(item, f"{source} items[{i}]", path, line, errors)
        return
    yield Document(source=source, obj=data, path=path, line=line)


def load_text(
    text: str,
    label: str,
    *,
    json_only: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    parser: YAMLParser = YAMLParser.AUTO,
) -> Loaded:
    """Objects in one manifest text; `label` names it in sources and errors."""
    out = Loaded()
    if not text.strip():
        out.errors.append(ManifestError(label, "empty file: no Kubernetes objects in it"))
        return out
    parsed = _parse_json(text, label, limits) if json_only else _parse_yaml(text, label, limits, parser)
    found = 0
    for number, line, data in parsed.documents:
        if data is None:  # an empty document between `---` separators
            continue
        found += 1
        out.documents.extend(_objects(data, f"{label}:doc {number}", label, line, out.errors))
    if parsed.error is not None:
        out.errors.append(parsed.error)
    elif not found and not out.errors:
        out.errors.append(ManifestError(label, "empty file: only comments or empty documents"))
    return out


# --- files, directories, stdin ------------------------------------------------------------------

_NOT_REGULAR = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _file_type(mode: int) -> str:
    for test, what in _NOT_REGULAR:
        if test(mode):
            return what
    return "not a regular file"


def _os_problem(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _too_large(size_known: int | None, limits: Limits) -> str:
    size = f"is {size_known} bytes, more" if size_known is not None else "is more"
    return (
        f"{size} than the {size_text(limits.max_file_bytes)} a manifest file may have: "
        "split it into smaller files, or raise the limit with --max-file-size"
    )


def _decode(data: bytes, label: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(label, f"not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def read_file(path: str | Path, *, limits: Limits = DEFAULT_LIMITS, stdin_hint: bool = True) -> str:
    """The text of one regular file. Raises `ManifestIOError` for anything else (FIFO,
    device, socket, directory, missing, unreadable, larger than `limits.max_file_bytes`)
    and `ManifestError` for bytes that are not UTF-8."""
    label = str(path)
    instead = ": copy its content to a file" + (", or pipe it to -f -" if stdin_hint else "")
    try:
        info = os.stat(path)
    except OSError as exc:
        problem = _os_problem(exc)
        if os.path.islink(path):
            target = excerpts.cut(os.readlink(path))
            problem = f"a symbolic link to {target}, which cannot be read: {problem}; fix or remove the link"
        raise ManifestIOError(label, problem) from None
    if stat.S_ISDIR(info.st_mode):
        raise ManifestIOError(label, "is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise ManifestIOError(
            label, f"is {_file_type(info.st_mode)}, not a regular file; only regular files are read{instead}"
        )
    if info.st_size > limits.max_file_bytes:
        raise ManifestIOError(label, _too_large(info.st_size, limits))
    try:
        # O_NONBLOCK: if the path became a FIFO since stat, opening it must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ManifestIOError(label, _os_problem(exc)) from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ManifestIOError(label, f"is not a regular file; only regular files are read{instead}")
        try:
            data = handle.read(limits.max_file_bytes + 1)
        except OSError as exc:
            raise ManifestIOError(label, _os_problem(exc)) from None
    if len(data) > limits.max_file_bytes:  # it grew since stat
        raise ManifestIOError(label, _too_large(None, limits))
    return _decode(data, label)


def read_stream(stream: IO[str], label: str = STDIN_LABEL, *, limits: Limits = DEFAULT_LIMITS) -> str:
    """At most `limits.max_file_bytes` of a stream (stdin), as UTF-8 text."""
    binary = getattr(stream, "buffer", None)
    if binary is not None:
        data = binary.read(limits.max_file_bytes + 1)
        if len(data) > limits.max_file_bytes:
            raise ManifestIOError(label, _too_large(None, limits))
        return _decode(data, label)
    text = stream.read(limits.max_file_bytes + 1)
    if len(text.encode("utf-8", "surrogatepass")) > limits.max_file_bytes:
        raise ManifestIOError(label, _too_large(None, limits))
    return text


def _walk(
    root: Path, recursive: bool, visited: set[tuple[int, int]], errors: list[ManifestError]
) -> list[Path]:
    """Manifest files under `root` in name order (subdirectories in place with `recursive`).

    Hidden entries are skipped. Symbolic links are followed, but a directory is
    entered once, known by (device, inode): a link to an ancestor is not a loop.
    """
    found: list[Path] = []
    pending: list[Iterator[Path]] = []

    def enter(directory: Path) -> None:
        try:
            entries = sorted(directory.iterdir())
        except OSError as exc:
            errors.append(ManifestIOError(str(directory), f"cannot list this directory: {_os_problem(exc)}"))
            return
        pending.append(iter(entries))

    enter(root)
    while pending:
        entry = next(pending[-1], None)
        if entry is None:
            pending.pop()
            continue
        if entry.name.startswith("."):
            continue
        try:
            info = entry.stat()
        except OSError:
            if entry.suffix.lower() in EXTENSIONS:
                found.append(entry)  # read_file says why it cannot be read
            continue
        if stat.S_ISDIR(info.st_mode):
            key = (info.st_dev, info.st_ino)
            if recursive and key not in visited:
                visited.add(key)
                enter(entry)
        elif entry.suffix.lower() in EXTENSIONS:
            found.append(entry)
    return found


def scan(
    inputs: Iterable[str | Path],
    *,
    recursive: bool = False,
    stdin: IO[str] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Loaded:
    """Read every input, collecting objects and problems (for reporting all at once).

    `inputs` are files, directories, or `-` for stdin (read once). A missing
    input or an unreadable file is a `ManifestIOError`; a directory without
    manifests is one too, since it is almost always a wrong path.
    """
    out = Loaded()
    stdin_read = False
    visited: set[tuple[int, int]] = set()
    for item in inputs:
        text_item = str(item)
        if text_item == STDIN:
            if stdin_read:
                continue
            stdin_read = True
            try:
                text = read_stream(stdin if stdin is not None else sys.stdin, limits=limits)
            except ManifestError as exc:
                out.errors.append(exc)
                continue
            part = load_text(text, STDIN_LABEL, limits=limits)
            out.documents.extend(part.documents)
            out.errors.extend(part.errors)
            continue
        path = Path(item)
        missing = False
        try:
            info = path.stat()
        except FileNotFoundError:
            info, missing = None, not path.is_symlink()
        except OSError:  # read_file says what (a symlink loop, a permission)
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode):
            key = (info.st_dev, info.st_ino)
            if key in visited:  # already read, as an input or inside one with -R
                continue
            visited.add(key)
            known = len(out.errors)
            files = _walk(path, recursive, visited, out.errors)
            if not files and len(out.errors) == known:  # else the walk said why
                out.errors.append(
                    ManifestIOError(
                        str(path),
                        f"no {', '.join('*' + e for e in EXTENSIONS)} files in this directory"
                        + ("" if recursive else " (subdirectories are not read without --recursive)"),
                    )
                )
        elif missing:
            out.errors.append(ManifestIOError(str(path), "no such file or directory"))
            continue
        else:
            files = [path]
        for file in files:
            try:
                text = read_file(file, limits=limits)
            except ManifestError as exc:
                out.errors.append(exc)
                continue
            part = load_text(text, str(file), json_only=file.suffix.lower() == ".json", limits=limits)
            out.documents.extend(part.documents)
            out.errors.extend(part.errors)
    return out


def load(
    inputs: Iterable[str | Path],
    *,
    recursive: bool = False,
    stdin: IO[str] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> list[Document]:
    """Every object of the inputs; raises the first `ManifestError` found."""
    loaded = scan(inputs, recursive=recursive, stdin=stdin, limits=limits)
    if loaded.errors:
        raise loaded.errors[0]
    return loaded.documents


__all__ = [
    "DEFAULT_LIMITS",
    "LIBYAML_AVAILABLE",
    "STDIN",
    "Document",
    "Limits",
    "Loaded",
    "ManifestError",
    "ManifestIOError",
    "YAMLParser",
    "add_limit_arguments",
    "limits_from",
    "load",
    "load_text",
    "parse_size",
    "read_file",
    "read_stream",
    "scan",
    "size_text",
]
