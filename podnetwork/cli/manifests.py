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

This module is the reader its callers use; its parts are the limits and errors
(`podnetwork.cli.manifestlimits`), the parsers (`manifestparse`) and the files,
streams and directories (`manifestfiles`).

libyaml parses when it is installed (about five times faster than PyYAML's
pure-Python parser on large files). It only turns text into events: composing,
the guards and the building of values are the same Python code either way, and
a syntax error is worded by the pure-Python parser, so documents and messages do
not depend on which one is installed, except where PyYAML's scanner is stricter
than libyaml and Kubernetes (a tab after a value, `|#`, `!!null,`): docs/api.md
lists them.
"""

from __future__ import annotations

import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from podnetwork.cli.manifestfiles import EXTENSIONS, STDIN, STDIN_LABEL, read_file, read_stream, walk
from podnetwork.cli.manifestlimits import (
    DEFAULT_LIMITS,
    KiB,
    Limits,
    ManifestError,
    ManifestIOError,
    MiB,
    YAMLParser,
    add_limit_arguments,
    limits_from,
    parse_size,
    size_text,
)
from podnetwork.cli.manifestparse import LIBYAML_AVAILABLE, parse_json, parse_yaml
from podnetwork.ground import excerpts


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
        # why: a manifest as the user wrote it, before any schema: its name must read even when
        # another metadata field is wrong, to name it in the error that says so
        return str((self.obj.get("metadata") or {}).get("name") or "")

    @property
    def namespace(self) -> str:
        return str((self.obj.get("metadata") or {}).get("namespace") or "")  # why: as `name`

    @property
    def ref(self) -> str:
        """`namespace/name`, or `name` for objects without a namespace."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass
class Loaded:
    """Everything read from a set of inputs: the objects and the problems found."""

    documents: list[Document] = field(default_factory=list)
    errors: list[ManifestError] = field(default_factory=list)


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
    parsed = parse_json(text, label, limits) if json_only else parse_yaml(text, label, limits, parser)
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


# --- inputs ---------------------------------------------------------------------------------------


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
            files = walk(path, recursive, visited, out.errors)
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
    "EXTENSIONS",
    "LIBYAML_AVAILABLE",
    "STDIN",
    "STDIN_LABEL",
    "Document",
    "KiB",
    "Limits",
    "Loaded",
    "ManifestError",
    "ManifestIOError",
    "MiB",
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
