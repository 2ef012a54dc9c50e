"""The claims this driver prepared on the node, one JSON file per claim uid, kept across restarts.

The kubelet keeps its own record of what it prepared and asks again after a restart of either
side (NodePrepareResources and NodeUnprepareResources are idempotent); the driver's record is
what lets a restarted driver answer a repeated prepare with the same devices and know, at
unprepare, what it had prepared. Each file is written whole and renamed into place (a crash
leaves the old file or the new one, never half of one).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: A Kubernetes uid as the API server makes it (a UUID); other uids are refused before they name a file.
_UID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,63}")


class StateError(RuntimeError):
    """The record cannot be read or written; the message names the file."""


class PreparedDevice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_names: list[str]
    pool: str
    device: str
    share_id: str | None = None
    podnetwork: str | None = None
    """The PodNetwork the device stood for when prepared (None: no longer published then)."""


class PreparedClaim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    uid: str
    namespace: str
    name: str
    devices: list[PreparedDevice] = Field(default_factory=list)
    prepared_at: str


def uid_problem(uid: str) -> str | None:
    if not _UID.fullmatch(uid):
        return f"claim uid {uid!r} is not a Kubernetes uid"
    return None


class Store:
    """The prepared claims under `folder` (made on first write, mode 0700)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._by_name: dict[tuple[str, str], PreparedClaim] | None = None

    def by_name(self, namespace: str, name: str) -> PreparedClaim | None:
        """The prepared claim of that name (the records read once, then kept up to date in memory;
        an unreadable record is left out here: `get` reports it)."""
        if self._by_name is None:
            self._by_name = {}
            for uid in self.uids():
                try:
                    found = self.get(uid)
                except StateError:
                    continue
                if found is not None:
                    self._by_name[(found.namespace, found.name)] = found
        return self._by_name.get((namespace, name))

    def _path(self, uid: str) -> Path:
        if problem := uid_problem(uid):
            raise StateError(problem)
        return self.folder / f"{uid}.json"

    def get(self, uid: str) -> PreparedClaim | None:
        path = self._path(uid)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateError(f"cannot read {path}: {exc.strerror}") from None
        try:
            return PreparedClaim.model_validate_json(text)
        except ValidationError as exc:
            raise StateError(f"{path} is not a prepared claim: {str(exc).splitlines()[0]}") from None

    def put(self, claim: PreparedClaim) -> None:
        path = self._path(claim.uid)
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(prefix=f".{claim.uid}.", dir=self.folder)
            try:
                with os.fdopen(fd, "w") as out:
                    out.write(claim.model_dump_json(indent=1))
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            self._sync_folder()
        except OSError as exc:
            raise StateError(f"cannot write {path}: {exc.strerror}") from None
        if self._by_name is not None:
            self._by_name[(claim.namespace, claim.name)] = claim

    def remove(self, uid: str) -> bool:
        """Forget a claim; False when there was nothing to forget."""
        path = self._path(uid)
        if self._by_name is not None:
            self._by_name = {k: v for k, v in self._by_name.items() if v.uid != uid}
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StateError(f"cannot remove {path}: {exc.strerror}") from None
        self._sync_folder()
        return True

    def uids(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        return sorted(p.stem for p in self.folder.glob("*.json") if not p.name.startswith("."))

    def _sync_folder(self) -> None:
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["PreparedClaim", "PreparedDevice", "StateError", "Store", "uid_problem"]
