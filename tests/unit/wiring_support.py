"""What an operator's `register` hands to kopf, seen through its meter (`podnetwork.cli.handlers`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Recorder:
    """A meter that keeps every handler `register` gives kopf: name -> (plural, function)."""

    def __init__(self) -> None:
        self.handlers: dict[str, tuple[str, Callable[..., Any]]] = {}

    def counted(self, fn: F, handler: str, resource: str) -> F:
        assert handler not in self.handlers, f"two handlers named {handler}"
        self.handlers[handler] = (resource, fn)
        return fn


def wired(watches: list[Any]) -> dict[str, str]:
    """Handler name -> plural, as `watches()` declares them."""
    out = {}
    for watch in watches:
        if watch.index is not None:
            out[watch.index_handler] = watch.plural
        if watch.event is not None:
            out[watch.event_handler] = watch.plural
    return out
