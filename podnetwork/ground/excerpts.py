"""Values quoted in messages, cut to a bounded length.

A manifest may hold a string of megabytes, or a structure whose aliases stand
for millions of elements. A message quotes the start of such a value, never all
of it, so one bad field cannot turn an error line into gigabytes of output.
Every message that quotes what the user wrote goes through here: the field
errors of `podnetwork validate` and the webhooks (`podnetwork.ground.fielderrors`),
the manifest reader (`podnetwork.cli.manifests`) and `podnetwork migrate`.
"""

from __future__ import annotations

import json
import re
import reprlib
from typing import Any

LIMIT = 200
"""Characters of a value shown in a message: a whole DNS name (253 is the longest
allowed, and longer ones are refused anyway) is rarely cut, a pasted file always is."""

LINE_LIMIT = 1000
"""Characters of a whole message whose text comes from elsewhere (a parser's or a
library's message that may embed the input): the bound of last resort."""

_MARK = "..."

_repr = reprlib.Repr()
_repr.maxstring = LIMIT
_repr.maxother = LIMIT
_repr.maxlevel = 4


def cut(text: str, limit: int = LIMIT) -> str:
    """`text`, or its first `limit` characters followed by how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}{_MARK} ({len(text)} characters, cut)"


def _json_head(value: Any, limit: int) -> tuple[str, bool]:
    """The JSON text of `value`, produced only as far as `limit` characters; whether it went on."""
    # iterencode without _one_shot is the pure-Python generator: it stops when we
    # stop asking, so a value that expands to gigabytes costs only its first chunks.
    chunks = json.JSONEncoder(ensure_ascii=False, sort_keys=True).iterencode(value)
    head: list[str] = []
    size = 0
    for chunk in chunks:
        head.append(chunk)
        size += len(chunk)
        if size > limit:
            return "".join(head)[:limit], True
    return "".join(head), False


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogates(text: str) -> str:
    # A lone surrogate (from a JSON "\\udfff" escape) has no UTF-8 form: written as the escape,
    # so the message can be printed, logged and sent.
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def value(obj: Any, limit: int = LIMIT) -> str:
    """`obj` as JSON (a Python repr for what JSON cannot show), at most `limit` characters
    of it followed by a mark when cut."""
    if isinstance(obj, str):
        if len(obj) <= limit:
            return _escape_surrogates(json.dumps(obj, ensure_ascii=False))
        head = _escape_surrogates(json.dumps(obj[:limit], ensure_ascii=False))
        return f"{head}{_MARK} ({len(obj)} characters, cut)"
    try:
        text, more = _json_head(obj, limit)
        text = _escape_surrogates(text)
    except (TypeError, ValueError, RecursionError):
        # Not JSON (bytes, a set, a cycle, a key JSON cannot sort, an int too long to
        # print in decimal): reprlib bounds every level of the structure itself.
        try:
            text = _repr.repr(obj)
        except ValueError:  # an int beyond Python's str() digit limit
            text = f"<{type(obj).__name__} too large to print>"
        more = len(text) > limit
        text = text[:limit]
    return f"{text}{_MARK} (cut)" if more else text


__all__ = ["LIMIT", "LINE_LIMIT", "cut", "value"]
