"""Kubernetes manifests from files, directories and stdin, as plain dicts.

Used by every command that takes `-f` (`validate`, `explain`, `graph`,
`migrate`). What `kubectl apply -f` accepts is accepted here: YAML or JSON,
several documents per file separated by `---`, `List` objects (`kind: List`,
`PodList`, ...) whose `items` are flattened, and `-` for stdin. A directory
contributes its `*.yaml`, `*.yml` and `*.json` files in name order, not its
subdirectories unless `recursive=True` (like `kubectl -f DIR` without `-R`).

Each object comes back as a `Document` whose `source` names where it came from
(`examples/pods.yaml:doc 2`), so every later message can point at it. Input that
cannot be a Kubernetes object is a `ManifestError` whose text is one line
naming the file, the document and, for syntax errors, the line and column.

YAML is read as Kubernetes reads it (sigs.k8s.io/yaml): timestamps stay
strings (`lastTransitionTime: 2024-01-01T00:00:00Z` is not a datetime), and a
key repeated in one mapping is an error rather than silently last-one-wins.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

STDIN = "-"
STDIN_LABEL = "<stdin>"
EXTENSIONS = (".yaml", ".yml", ".json")


class ManifestError(ValueError):
    """Input that cannot be read as Kubernetes objects. `str()` is one line."""

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problem = " ".join(problem.split())  # one line, whatever the parser said
        super().__init__(f"{source}: {self.problem}")


class ManifestIOError(ManifestError):
    """The input could not be opened or read at all (missing file, permissions)."""


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


class _KubeLoader(yaml.SafeLoader):
    """SafeLoader without timestamp resolution and with duplicate-key detection."""


_KubeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: _KubeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a scalar", key_node.start_mark
            ) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"mapping key {key!r} already defined", key_node.start_mark
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=True)


_KubeLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return f"invalid YAML at character {exc.position + 1}: control character U+{code:04X} is not allowed"
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        what = exc.problem or exc.context or "syntax error"
        if exc.context and exc.problem:
            what = f"{exc.problem} ({exc.context})"
        return f"invalid YAML at {where}{what}"
    return f"invalid YAML: {exc}"


def _yaml_documents(text: str, label: str) -> Iterator[tuple[int, int, Any]]:
    """(doc number, start line, data) per YAML document; null documents are skipped."""
    try:
        loader = _KubeLoader(text)
    except yaml.YAMLError as exc:  # the reader refuses control characters up front
        raise ManifestError(f"{label}:doc 1", _yaml_problem(exc)) from None
    number = 0
    try:
        while True:
            try:
                if not loader.check_node():
                    return
                node = loader.get_node()
            except yaml.YAMLError as exc:
                raise ManifestError(f"{label}:doc {number + 1}", _yaml_problem(exc)) from None
            number += 1
            if node is None:  # pragma: no cover - check_node said there is one
                continue
            try:
                data = loader.construct_document(node)
            except yaml.YAMLError as exc:
                raise ManifestError(f"{label}:doc {number}", _yaml_problem(exc)) from None
            except RecursionError:
                raise ManifestError(f"{label}:doc {number}", "nested too deeply") from None
            yield number, node.start_mark.line + 1, data
    finally:
        loader.dispose()


def _json_documents(text: str, label: str) -> Iterator[tuple[int, int, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"{label}:doc 1", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise ManifestError(f"{label}:doc 1", "nested too deeply") from None
    yield 1, 1, data


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
            errors.append(ManifestError(source, f"`items` of a {data['kind']} must be a list"))
            return
        for i, item in enumerate(items):
            yield from _objects(item, f"{source} items[{i}]", path, line, errors)
        return
    yield Document(source=source, obj=data, path=path, line=line)


def load_text(text: str, label: str, *, json_only: bool = False) -> Loaded:
    """Objects in one manifest text; `label` names it in sources and errors."""
    out = Loaded()
    if not text.strip():
        out.errors.append(ManifestError(label, "empty file: no Kubernetes objects in it"))
        return out
    parse = _json_documents if json_only else _yaml_documents
    found = 0
    try:
        for number, line, data in parse(text, label):
            if data is None:  # an empty document between `---` separators
                continue
            found += 1
            out.documents.extend(_objects(data, f"{label}:doc {number}", label, line, out.errors))
    except ManifestError as exc:
        out.errors.append(exc)
        return out
    if not found and not out.errors:
        out.errors.append(ManifestError(label, "empty file: only comments or empty documents"))
    return out


def _files(path: Path, recursive: bool) -> list[Path]:
    """Manifest files of a directory, in name order; hidden entries are skipped."""
    found: list[Path] = []
    for entry in sorted(path.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            if recursive:
                found.extend(_files(entry, recursive))
        elif entry.suffix.lower() in EXTENSIONS:
            found.append(entry)
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(str(path), f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ManifestIOError(str(path), exc.strerror or str(exc)) from None


def scan(
    inputs: Iterable[str | Path], *, recursive: bool = False, stdin: IO[str] | None = None
) -> Loaded:
    """Read every input, collecting objects and problems (for reporting all at once).

    `inputs` are files, directories, or `-` for stdin (read once). A missing
    input or an unreadable file is a `ManifestIOError`; a directory without
    manifests is one too, since it is almost always a wrong path.
    """
    out = Loaded()
    stdin_read = False
    for item in inputs:
        text_item = str(item)
        if text_item == STDIN:
            if stdin_read:
                continue
            stdin_read = True
            stream = stdin if stdin is not None else sys.stdin
            part = load_text(stream.read(), STDIN_LABEL)
            out.documents.extend(part.documents)
            out.errors.extend(part.errors)
            continue
        path = Path(item)
        if path.is_dir():
            files = _files(path, recursive)
            if not files:
                out.errors.append(
                    ManifestIOError(
                        str(path),
                        f"no {', '.join('*' + e for e in EXTENSIONS)} files in this directory"
                        + ("" if recursive else " (subdirectories are not read without --recursive)"),
                    )
                )
        elif path.exists():
            files = [path]
        else:
            out.errors.append(ManifestIOError(str(path), "no such file or directory"))
            continue
        for file in files:
            try:
                text = _read(file)
            except ManifestError as exc:
                out.errors.append(exc)
                continue
            part = load_text(text, str(file), json_only=file.suffix.lower() == ".json")
            out.documents.extend(part.documents)
            out.errors.extend(part.errors)
    return out


def load(
    inputs: Iterable[str | Path], *, recursive: bool = False, stdin: IO[str] | None = None
) -> list[Document]:
    """Every object of the inputs; raises the first `ManifestError` found."""
    loaded = scan(inputs, recursive=recursive, stdin=stdin)
    if loaded.errors:
        raise loaded.errors[0]
    return loaded.documents


__all__ = [
    "STDIN",
    "Document",
    "Loaded",
    "ManifestError",
    "ManifestIOError",
    "load",
    "load_text",
    "scan",
]
