"""What a command that reads many objects says about each one it leaves as it is.

`podnetwork migrate` and `podnetwork export-dra` read a whole inventory (files or a
cluster) and decide per object; what they cannot do, or do not do on purpose, is a
`Finding` about one object: refused (with a reason), a note, or skipped. Both print
the same lines, one per finding, marked as `podnetwork migrate` has always marked
them:

    ! SOURCE: KIND NAMESPACE/NAME: REASON: MESSAGE    cannot be done
    i SOURCE: KIND NAMESPACE/NAME: MESSAGE            done, with a note
    ~ SOURCE: KIND NAMESPACE/NAME: MESSAGE            left alone on purpose

It knows nothing of the KEP or the NPWG: the reasons are the products' own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from podnetwork.ground import excerpts


@dataclass(frozen=True)
class ObjectRef:
    """Kind, namespace and name of an object; prints as `Kind namespace/name` (`Kind name`
    when cluster-scoped), each part cut to `excerpts.LIMIT`: they come from the input."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        name, namespace = excerpts.cut(self.name), excerpts.cut(self.namespace)
        where = f"{namespace}/{name}" if namespace else name
        return f"{excerpts.cut(str(self.kind))} {where}"

    @property
    def whole(self) -> str:
        """The same text, nothing cut."""
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Finding:
    """One object a command leaves as it is (`reason` says why it could not), or a note about one."""

    ref: ObjectRef
    message: str
    reason: str = ""
    """Why it cannot be done, a product's vocabulary (`InvalidObject`, `MissingNetworkAttachmentDefinition`);
    empty for notes and skipped objects."""
    source: str = ""
    """Where the object was read: `FILE:doc N`, or empty for a cluster."""

    def line(self, *, bounded: bool = True) -> str:
        """`SOURCE: REF: REASON: MESSAGE`. Bounded: the names and the message cut (a message may
        quote the input); unbounded: as they are."""
        where = f"{self.source}: " if self.source else ""
        ref = str(self.ref) if bounded else self.ref.whole
        reason = f"{self.reason}: " if self.reason else ""
        message = excerpts.cut(self.message, excerpts.LINE_LIMIT) if bounded else self.message
        return f"{where}{ref}: {reason}{message}"

    def __str__(self) -> str:
        return self.line()


def report(
    refused: Iterable[Finding], notes: Iterable[Finding], skipped: Iterable[Finding], *, bounded: bool = True
) -> str:
    """The findings as lines: `!` for each refused object, then `i` for each note, then `~` for each
    object skipped on purpose."""
    lines = [f"! {f.line(bounded=bounded)}\n" for f in refused]
    lines += [f"i {f.line(bounded=bounded)}\n" for f in notes]
    lines += [f"~ {f.line(bounded=bounded)}\n" for f in skipped]
    return "".join(lines)


__all__ = ["Finding", "ObjectRef", "report"]
