"""The name rules Kubernetes and the Linux kernel apply, written once.

The KEP layer's static validation (`podnetwork.kep.validation`) and the NPWG library
(`bridge.npwg.names`) both check object names and interface names; each words
its own errors (Kubernetes field errors there, NPWG section numbers here), but
the rule itself lives only in this module.
"""

from __future__ import annotations

import re

#: RFC 1123 label: a namespace name, a NetworkAttachmentDefinition name in NPWG 3.3.
DNS1123_LABEL_MAX = 63
#: RFC 1123 subdomain: most object names (pods, PodNetworks).
DNS1123_SUBDOMAIN_MAX = 253
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(\.{_LABEL})*")

#: Linux IFNAMSIZ is 16 including the terminating NUL (include/uapi/linux/if.h).
LINUX_IFNAME_MAX_BYTES = 15
#: Bytes the kernel's `dev_valid_name()` refuses: '/', ':', NUL and what
#: lib/ctype.c calls space (which includes 0xA0, a UTF-8 continuation byte).
_LINUX_IFNAME_BAD_BYTES = frozenset(b"/:\0\t\n\v\f\r \xa0")


def is_dns1123_label(value: str) -> bool:
    """Lower-case alphanumerics and '-', starting and ending alphanumeric (length not checked)."""
    return _LABEL_RE.fullmatch(value) is not None


def is_dns1123_subdomain(value: str) -> bool:
    """Dot-separated DNS-1123 labels (length not checked)."""
    return _SUBDOMAIN_RE.fullmatch(value) is not None


def utf8_length(value: str) -> int:
    """Bytes of `value` in UTF-8, counting a lone surrogate as the 3 bytes the kernel would see."""
    return len(value.encode("utf-8", "surrogatepass"))


def lone_surrogates(value: str) -> list[str]:
    """The lone UTF-16 surrogates in `value` (U+D800..U+DFFF), sorted, each once.

    JSON can carry one as an escape ("\\udfff") and Python decodes it, but it has no UTF-8
    form: a name holding one cannot reach a plugin's environment, a log or the kernel."""
    return sorted({c for c in value if "\ud800" <= c <= "\udfff"})


def surrogate_problem(value: str) -> str | None:
    """Why `value` is not Unicode text a name may be made of, or None."""
    found = lone_surrogates(value)
    if not found:
        return None
    shown = ", ".join(f"U+{ord(c):04X}" for c in found)
    return f"must be valid Unicode text, but holds the lone surrogate {shown}, which has no UTF-8 form"


def linux_ifname_bad_characters(value: str) -> list[str]:
    """The characters of `value` that `dev_valid_name()` refuses, sorted, each once.

    The kernel tests bytes, with its own isspace(): 0xA0 (a UTF-8 continuation
    byte, as in "à") is a space to it, Unicode spaces such as U+2003 are not.
    """
    return sorted(
        {c for c in value if any(b in _LINUX_IFNAME_BAD_BYTES for b in c.encode("utf-8", "surrogatepass"))}
    )


def linux_ifname_problem(value: str) -> str | None:
    """Why the kernel's `dev_valid_name()` refuses `value`, or None.

    1..15 bytes, not `.` or `..`, no `/`, `:`, NUL or whitespace; and text (no lone surrogate),
    since the name is passed to plugins as UTF-8 and written into JSON.
    """
    if value == "":
        return "must not be empty"
    if problem := surrogate_problem(value):
        return problem
    if utf8_length(value) > LINUX_IFNAME_MAX_BYTES:
        return f"must be at most {LINUX_IFNAME_MAX_BYTES} bytes (Linux IFNAMSIZ)"
    if value in (".", ".."):
        return "must not be '.' or '..'"
    bad = linux_ifname_bad_characters(value)
    if bad:
        return "a Linux interface name may not contain " + ", ".join(repr(c) for c in bad)
    return None


__all__ = [
    "DNS1123_LABEL_MAX",
    "DNS1123_SUBDOMAIN_MAX",
    "LINUX_IFNAME_MAX_BYTES",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "linux_ifname_bad_characters",
    "linux_ifname_problem",
    "lone_surrogates",
    "surrogate_problem",
    "utf8_length",
]
