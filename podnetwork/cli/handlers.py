"""kopf's `index` and `on.event` decorators for the operators, each handler's runs counted; and
`Watch`, what an operator watches, for whoever feeds it events other than kopf (the demo).

kopf has no public hook around a handler run, so the count wraps the function before
kopf registers it. The wrapper keeps the function's name and qualified name, so the
handler ids kopf derives from them do not change, and it stays a coroutine function
when the handler is one (kopf runs plain functions in a thread).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import kopf

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Watch:
    """One kind an operator watches, and the entry points of its orchestration for it.

    kopf's handlers (each operator's `register`) call exactly these, and so does the
    demo's store feed, the same way: `index` with every object that is not deleted,
    before any `event` (kopf runs no event handler before every index has seen its
    initial listing), then `event` with the watch event's type (None for an object of
    the initial listing) and the object.
    """

    plural: str
    api_version: str
    kind: str
    index: Callable[[Mapping[str, Any]], None] | None = None
    index_handler: str = ""
    """The name of the kopf handler that calls `index` (its metrics label)."""
    event: Callable[[str | None, Mapping[str, Any]], Awaitable[None]] | None = None
    event_handler: str = ""
    annotation: str | None = None
    """`event` sees only objects carrying this annotation (kopf's `annotations={...: PRESENT}`)."""


class Meter(Protocol):
    def counted(self, fn: F, handler: str, resource: str) -> F: ...


class Handlers:
    """Decorators that count through `meter` (no meter: kopf's own, unchanged)."""

    def __init__(self, meter: Meter | None = None) -> None:
        self.meter = meter

    def index(self, *resource: str, **options: Any) -> Callable[[F], F]:
        return self._counting(kopf.index, resource, options)

    def event(self, *resource: str, **options: Any) -> Callable[[F], F]:
        return self._counting(kopf.on.event, resource, options)

    def _counting(self, decorator: Callable[..., Any], resource: tuple[str, ...],
                  options: dict[str, Any]) -> Callable[[F], F]:
        def decorate(fn: F) -> F:
            if self.meter is not None:
                # The resource label is the plural: the last positional part of kopf's selector.
                fn = self.meter.counted(fn, str(options.get("id") or fn.__name__),
                                        resource[-1] if resource else "unknown")
            decorator(*resource, **options)(fn)
            return fn

        return decorate


class NoEssence(kopf.DiffBaseStorage):
    """A diff-base storage for an operator with `index` and `on.event` handlers only.

    For every event of every watched object, kopf builds the object's "essence" (a deep copy of
    the whole body, managedFields and status included, then trimmed) and clears it of progress
    (two more deep copies), only to diff it for change-detecting (on.create/update/resume/delete)
    and daemon/timer handlers. Our operators have none (tests/unit/*/test_kopf_wiring.py checks),
    so that diff is never read, yet it was about a third of each operator's CPU per pod
    (docs/benchmarks.md, "Where the operators' CPU per pod goes"). Nothing is stored either.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None
