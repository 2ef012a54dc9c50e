"""How the type of a decoded JSON value reads in an error message ("must be a string, not a number")."""

from __future__ import annotations

from typing import Any


def describe(value: Any) -> str:
    """`null`, `a boolean`, `a number`, `a string`, `a list` or `an object`; a value that
    JSON cannot hold (a test's set, say) reads as its Python type's name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


__all__ = ["describe"]
