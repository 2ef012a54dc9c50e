"""What one manifest input may ask of the reader, and how an input that cannot be read is told.

Shared by the parts of the manifest reader (`podnetwork.cli.manifests`): the limits
(`Limits`, `--max-file-size`), the errors whose text is one line naming the file
and the document (`ManifestError`, `ManifestIOError` for input that cannot be read
at all), and the choice of YAML parser.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from enum import StrEnum

from podnetwork.ground import excerpts

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


def add_limit_arguments(parser: argparse.ArgumentParser,
                        help: str = "refuse manifest files (and stdin) larger than this, e.g. 16Mi") -> None:
    """`--max-file-size`, for every command that reads manifest files; `help` says which."""

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
        help=f"{help} (default {size_text(DEFAULT_LIMITS.max_file_bytes).split(' (')[0]})",
    )


def limits_from(args: argparse.Namespace) -> Limits:
    """The `Limits` of the arguments `add_limit_arguments` added."""
    return Limits(max_file_bytes=getattr(args, "max_file_size", DEFAULT_LIMITS.max_file_bytes))


__all__ = [
    "DEFAULT_LIMITS",
    "KiB",
    "Limits",
    "ManifestError",
    "ManifestIOError",
    "MiB",
    "YAMLParser",
    "add_limit_arguments",
    "limits_from",
    "parse_size",
    "size_text",
]
