"""kopf's `index` and `on.event` decorators for the operators, each handler's runs counted.

kopf has no public hook around a handler run, so the count wraps the function before
kopf registers it. The wrapper keeps the function's name and qualified name, so the
handler ids kopf derives from them do not change, and it stays a coroutine function
when the handler is one (kopf runs plain functions in a thread).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import kopf

F = TypeVar("F", bound=Callable[..., Any])


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
