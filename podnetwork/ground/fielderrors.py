"""Kubernetes-style field errors (as in apimachinery's `field.Error`).

`str(FieldError)` reads like the API server's own messages, e.g.
`spec.networks[1].interfaceName: Duplicate value: "net1"`, so users meet one
format whether the error comes from `podnetwork validate`, the admission webhook
or the API server. Values and paths come from the user's object, so they are
cut to a bounded length (`podnetwork.ground.excerpts`): an error about a megabyte-long
field is one short line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from podnetwork.ground import excerpts


class ErrorType(StrEnum):
    """The error types of apimachinery's `field.ErrorType`, as they print."""

    REQUIRED = "Required value"
    INVALID = "Invalid value"
    DUPLICATE = "Duplicate value"
    FORBIDDEN = "Forbidden"
    TOO_LONG = "Too long"
    TOO_MANY = "Too many"
    NOT_SUPPORTED = "Unsupported value"


_NO_VALUE = object()


@dataclass(frozen=True)
class FieldError:
    """One problem with one field: where, what kind, the bad value, and why."""

    path: str
    type: ErrorType
    value: Any = _NO_VALUE
    detail: str = ""

    def __str__(self) -> str:
        shows_value = self.type in (
            ErrorType.INVALID,
            ErrorType.DUPLICATE,
            ErrorType.NOT_SUPPORTED,
        )
        text = f"{excerpts.cut(self.path)}: {self.type.value}"
        if shows_value and self.value is not _NO_VALUE:
            text += f": {excerpts.value(self.value)}"
        if self.detail:
            # Details are our prose, but some quote a library's message about the value.
            text += f": {excerpts.cut(self.detail, excerpts.LINE_LIMIT)}"
        return text

    def to_status_cause(self) -> dict[str, str]:
        """The `metav1.StatusCause` an admission response carries for this error."""
        reason = {
            ErrorType.REQUIRED: "FieldValueRequired",
            ErrorType.INVALID: "FieldValueInvalid",
            ErrorType.DUPLICATE: "FieldValueDuplicate",
            ErrorType.FORBIDDEN: "FieldValueForbidden",
            ErrorType.TOO_LONG: "FieldValueTooLong",
            ErrorType.TOO_MANY: "FieldValueTooMany",
            ErrorType.NOT_SUPPORTED: "FieldValueNotSupported",
        }[self.type]
        # metav1.StatusCause spells its type "reason" in JSON; the API server drops any other key
        return {"reason": reason, "field": excerpts.cut(self.path), "message": str(self)}


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, ErrorType.REQUIRED, detail=detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, ErrorType.INVALID, value, detail)


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError(path, ErrorType.DUPLICATE, value)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, ErrorType.FORBIDDEN, detail=detail)


def too_long(path: str, limit: int, unit: str = "bytes") -> FieldError:
    return FieldError(path, ErrorType.TOO_LONG, detail=f"may not be more than {limit} {unit}")


@dataclass
class InvalidObject(ValueError):
    """Raised when input cannot be used; carries every field error found."""

    errors: list[FieldError] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        return "; ".join(str(e) for e in self.errors)
