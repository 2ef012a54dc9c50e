"""From one compiled table to another: the few commands that make a pod's table the new one. Pure.

`dnat.compile_pod` writes a whole table; sending it whole on every endpoint change costs each
client pod a transaction of every Service (hundreds of commands, ~100 ms of nft on a loaded
node). `changes(old, new)` compares two compiled tables (their `Ruleset.commands`) object by
object and returns what differs, for one nft transaction that keeps the table:

- a chain in both whose rules differ is flushed and refilled (`flush chain` + `add rule`): the
  Service chain of an endpoint change, one rule;
- a set or map in both: its elements that left are deleted, the new ones added (an element
  whose verdict changed is both);
- a chain, set or map only in `new` is added, one only in `old` deleted, after everything that
  referred to it went in the same transaction.

The order nft and the kernel accept: new chains declared, new sets and maps added, changed and
removed chains flushed, elements deleted, rules and elements added, then the removed maps, sets
and chains deleted (nothing refers to them any more). The kernel applies the
transaction whole or not at all, so a connection never meets half an update, as with the
whole table.

`None` means "write the whole table": there is no old table (or no new one), or an object's
declaration changed (a set's type or timeout, a chain's hook or comment), which an update in
place cannot do. Chains keep their names across updates (`dnat`'s digests), which is what
keeps the changes small.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.services.dnat import FAMILY, TABLE, Command


def _in_table() -> dict[str, Any]:
    return {"family": FAMILY, "table": TABLE}


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@dataclass
class Table:
    """A compiled table read back into its objects (what `changes` compares)."""

    table: Any = None
    sets: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    """Name -> ("set" or "map", its declaration without elements)."""
    elements: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Set or map name -> its elements by key (canonical JSON): the element as written."""
    chains: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Name -> its declaration."""
    rules: dict[str, list[Any]] = field(default_factory=dict)
    """Chain name -> its rules' expressions, in order."""


def element_key(kind: str, element: Any) -> str:
    """An element's identity: a set's element is its key; a map's, the first of its pair."""
    return _canon(element[0] if kind == "map" else element)


def read(commands: Iterable[Command]) -> Table:
    """The objects of a table that `commands` (all `add`, as `dnat` writes them) build from nothing.

    ValueError on a command `dnat` does not write.
    """
    out = Table()
    for command in commands:
        verb, body = _one(command)
        kind, obj = _one(body)
        if verb != "add" or not isinstance(obj, dict):
            raise ValueError(f"not a command of a compiled table: {_canon(command)[:200]}")
        if kind == "table":
            out.table = obj
        elif kind in ("set", "map"):
            declaration = {k: v for k, v in obj.items() if k != "elem"}
            out.sets[obj["name"]] = (kind, declaration)
            out.elements[obj["name"]] = {element_key(kind, e): e for e in obj.get("elem", ())}
        elif kind == "chain":
            out.chains[obj["name"]] = obj
            out.rules.setdefault(obj["name"], [])
        elif kind == "rule":
            out.rules.setdefault(obj["chain"], []).append(obj["expr"])
        else:
            raise ValueError(f"not a command of a compiled table: {_canon(command)[:200]}")
    return out


def _one(item: Any) -> tuple[str, Any]:
    if not isinstance(item, dict) or len(item) != 1:
        raise ValueError(f"not a libnftables JSON command: {_canon(item)[:200]}")
    ((key, value),) = item.items()
    return key, value


def changes(old: Sequence[Command], new: Sequence[Command]) -> list[Command] | None:
    """The commands that turn the table `old` builds into the one `new` builds, in one transaction
    that keeps the table; [] when they are the same; None when only a whole write will do
    (module docstring)."""
    if not old or not new:
        return None
    before, after = read(old), read(new)
    if before.table != after.table:
        return None
    for name in before.sets.keys() & after.sets.keys():
        if before.sets[name] != after.sets[name]:
            return None
    for name in before.chains.keys() & after.chains.keys():
        if before.chains[name] != after.chains[name]:
            return None

    new_chains = [n for n in after.chains if n not in before.chains]
    gone_chains = [n for n in before.chains if n not in after.chains]
    changed = [n for n in after.chains if n in before.chains and before.rules[n] != after.rules[n]]
    new_sets = [n for n in after.sets if n not in before.sets]
    gone_sets = [n for n in before.sets if n not in after.sets]
    kept_sets = [n for n in after.sets if n in before.sets]

    out: list[Command] = []
    out += [{"add": {"chain": after.chains[n]}} for n in new_chains]
    out += [_declare(after, n) for n in new_sets]  # a map's verdicts name chains declared above
    out += [{"flush": {"chain": {**_in_table(), "name": n}}} for n in changed + gone_chains]
    adds: list[Command] = []
    for name in kept_sets:
        kind = after.sets[name][0]
        old_elements, new_elements = before.elements[name], after.elements[name]
        left = [k for k, e in old_elements.items() if new_elements.get(k) != e]
        came = [e for k, e in new_elements.items() if old_elements.get(k) != e]
        if left:
            keys = [json.loads(k) for k in left] if kind == "map" else [old_elements[k] for k in left]
            out.append({"delete": {"element": {**_in_table(), "name": name, "elem": keys}}})
        if came:
            adds.append({"add": {"element": {**_in_table(), "name": name, "elem": came}}})
    out += [{"add": {"rule": {**_in_table(), "chain": n, "expr": expr}}}
            for n in changed + new_chains for expr in after.rules[n]]
    out += adds
    out += [{"delete": {before.sets[n][0]: {**_in_table(), "name": n}}} for n in gone_sets]
    out += [{"delete": {"chain": {**_in_table(), "name": n}}} for n in gone_chains]
    return out


def _declare(table: Table, name: str) -> Command:
    kind, declaration = table.sets[name]
    elements = list(table.elements[name].values())
    return {"add": {kind: {**declaration, "elem": elements} if elements else declaration}}


__all__ = ["Table", "changes", "element_key", "read"]
