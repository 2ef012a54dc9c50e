"""How a scenario judges: the `Judge` that collects failures (each naming its NPWG section) and
notes, what the recording delegates saw read back as attachments, and the bench steps every
scenario takes (an ADD or DEL that must pass, a NAD from a configuration).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from conformance.npwg.bench import Bench, Invocation, Pod, Record

Verdict = Literal["passed", "failed", "skipped"]


class Skip(Exception):
    """The scenario cannot judge this plugin (the reason says why); not a failure."""


@dataclass
class Judge:
    """Collects one scenario's failures (each naming its section) and notes."""

    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def require(self, ok: bool, section: str, message: str) -> bool:
        if not ok:
            self.failures.append(f"NPWG {section}: {message}")
        return ok

    def note(self, message: str) -> None:
        self.notes.append(message)

    def invoked(self, inv: Invocation, section: str, what: str) -> bool:
        return self.require(inv.ok, section, f"{what}: the plugin failed, {inv.describe()}")

    def refused(self, inv: Invocation, section: str, what: str) -> bool:
        if inv.ok:
            return self.require(False, section, f"{what}: the plugin succeeded, it must fail")
        return self.require(
            inv.is_cni_error,
            "2.1 (CNI)",
            f"{what}: a failure must be a CNI error object "
            f"with an integer code on stdout, got {inv.describe()}",
        )


# --- reading the recordings ----------------------------------------------------------------------


@dataclass(frozen=True)
class Attachment:
    """One network attachment as the delegates saw it: the 4.2.1 tuple and its records."""

    network: str
    ifname: str
    records: tuple[Record, ...]

    @property
    def key(self) -> tuple[str, str]:
        return self.network, self.ifname

    def types(self) -> list[str]:
        return [r.type for r in self.records]


def attachments(records: Iterable[Record], command: str) -> list[Attachment]:
    """The attachments `command` reached, in the order of their first execution."""
    grouped: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        if r.command == command:
            grouped.setdefault((r.network, r.ifname), []).append(r)
    return [Attachment(k[0], k[1], tuple(v)) for k, v in grouped.items()]


def first_seq(records: Iterable[Record], command: str) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for r in records:
        if r.command == command:
            out.setdefault((r.network, r.ifname), r.seq)
    return out


def names(atts: Iterable[Attachment]) -> list[str]:
    return [f"{a.network}@{a.ifname}" for a in atts]


def add_ok(bench: Bench, judge: Judge, pod: Pod, section: str, what: str, **kw: Any) -> Invocation:
    inv = bench.cni("ADD", pod, **kw)
    judge.invoked(inv, section, what)
    return inv


def delete(bench: Bench, judge: Judge, pod: Pod, section: str = "7.2", what: str = "DEL") -> Invocation:
    inv = bench.cni("DEL", pod)
    judge.invoked(inv, section, what)
    return inv


def single(network: str, type_: str, **extra: Any) -> dict[str, Any]:
    return {"cniVersion": "${V}", "name": network, "type": type_, **extra}


def with_version(bench: Bench, conf: Mapping[str, Any]) -> dict[str, Any]:
    """`conf` with each `${V}` replaced by the bench's CNI version."""
    text = json.dumps(conf).replace("${V}", bench.cni_version)
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def nad(bench: Bench, name: str, conf: Mapping[str, Any] | None) -> None:
    bench.nad(name, None if conf is None else with_version(bench, conf))


def check_teardown(judge: Judge, records: list[Record], section: str = "7.2") -> None:
    """Every attachment ADD reached was DELed after it, first DELs in the reverse order of the ADDs."""
    adds = first_seq(records, "ADD")
    dels: dict[tuple[str, str], int] = {}
    for r in records:
        if r.command == "DEL" and (r.network, r.ifname) in adds and r.seq > adds[(r.network, r.ifname)]:
            dels.setdefault((r.network, r.ifname), r.seq)
    missing = [f"{n}@{i}" for (n, i) in adds if (n, i) not in dels]
    judge.require(
        not missing,
        section,
        f"every attachment attempted during set-up must be torn down; never DELed: {', '.join(missing)}",
    )
    added_order = [k for k, _ in sorted(adds.items(), key=lambda kv: kv[1]) if k in dels]
    deleted_order = [k for k, _ in sorted(dels.items(), key=lambda kv: kv[1])]
    judge.require(
        deleted_order == list(reversed(added_order)),
        section,
        "attachments must be torn down in the reverse order of set-up (as CNI DELs a list): ADD order "
        f"{', '.join(f'{n}@{i}' for n, i in added_order)}; DEL order "
        f"{', '.join(f'{n}@{i}' for n, i in deleted_order)}",
    )


__all__ = [
    "Attachment",
    "Judge",
    "Skip",
    "Verdict",
    "add_ok",
    "attachments",
    "check_teardown",
    "delete",
    "first_seq",
    "nad",
    "names",
    "single",
    "with_version",
]
