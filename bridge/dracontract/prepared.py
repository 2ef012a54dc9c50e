"""The driver's records of prepared claims (`bridge.dracontract.state`) as the CNI agent reads them.

Read-only and without pydantic (the agent's hot path): each `<uid>.json` under the driver's state
dir is read with `json` into a `Prepared`, and kept while the file's size and mtime stay the
same, so an ADD re-reads only the records written since the last one; the folder is listed only
when its own mtime changed (a stat per lookup otherwise). The driver writes each file whole and
renames it into place, so a file is never seen half written; it is the only writer.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: How long after the folder's last change a listing must be made to be trusted until the next one.
_SETTLED_NS = 1_000_000_000


@dataclass(frozen=True)
class Prepared:
    """One prepared claim: which PodNetwork each of its devices stood for, in the record's order."""

    uid: str
    namespace: str
    name: str
    podnetworks: tuple[str | None, ...]
    """None: the device stood for no PodNetwork the driver still published when it prepared it."""


def parse(data: Any) -> Prepared | None:
    """A record's JSON (`state.PreparedClaim`'s dump) as a `Prepared`; None when it is not one."""
    if not isinstance(data, dict):
        return None
    uid, namespace, name, devices = (data.get(k) for k in ("uid", "namespace", "name", "devices"))
    if not (isinstance(uid, str) and isinstance(namespace, str) and isinstance(name, str)
            and isinstance(devices, list) and all(isinstance(d, dict) for d in devices)):
        return None
    podnetworks = tuple(pn if isinstance(pn := d.get("podnetwork"), str) else None for d in devices)
    return Prepared(uid, namespace, name, podnetworks)


class Records:
    """The records under `folder` (the driver's `--state-dir`), looked up by claim."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._files: dict[str, tuple[tuple[int, int], Prepared | None]] = {}
        self._by_name: dict[tuple[str, str], Prepared] = {}
        self._listed_mtime: int | None = None

    def by_name(self, namespace: str, name: str) -> Prepared | None:
        """The prepared claim `namespace/name` as the folder holds it now."""
        self._refresh()
        return self._by_name.get((namespace, name))

    def _refresh(self) -> None:
        # The folder's mtime changes with every record the driver renames into place or removes;
        # unchanged since a listing made a second or more after it, nothing changed (a change in
        # the same clock tick as the listing is why the second: then the folder is listed again).
        try:
            mtime = os.stat(self.folder).st_mtime_ns
        except OSError:
            mtime = None
        if mtime is not None and mtime == self._listed_mtime:
            return
        listed_at = time.time_ns()
        self._list()
        self._listed_mtime = mtime if mtime is not None and listed_at - mtime >= _SETTLED_NS else None

    def _list(self) -> None:
        try:
            entries = [e for e in os.scandir(self.folder)
                       if e.name.endswith(".json") and not e.name.startswith(".")]  # not temp files
        except (FileNotFoundError, NotADirectoryError):
            entries = []  # no claim prepared on this node yet (the driver makes it on first write)
        except OSError as exc:
            log.warning("cannot list the DRA driver's records in %s: %s", self.folder, exc.strerror)
            entries = []
        files: dict[str, tuple[tuple[int, int], Prepared | None]] = {}
        for entry in entries:
            try:
                stat = entry.stat()
            except OSError:
                continue  # removed since the listing: unprepared
            key = (stat.st_mtime_ns, stat.st_size)
            known = self._files.get(entry.name)
            unchanged = known is not None and known[0] == key
            files[entry.name] = known if known is not None and unchanged else (key, self._read(entry.path))
        self._files = files
        self._by_name = {(p.namespace, p.name): p for _, p in files.values() if p is not None}

    @staticmethod
    def _read(path: str) -> Prepared | None:
        try:
            with open(path, "rb") as f:
                found = parse(json.loads(f.read()))
        except (OSError, ValueError) as exc:
            log.warning("cannot read the DRA driver's record %s: %s", path, exc)
            return None
        if found is None:
            log.warning("the DRA driver's record %s is not a prepared claim; left out", path)
        return found


__all__ = ["Prepared", "Records", "parse"]
