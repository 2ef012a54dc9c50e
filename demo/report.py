"""What the demo prints, and what `--check` asserts.

The demo narrates in numbered sections; every observation that could be wrong
goes through `Report.check`, which prints it (a tick or a cross) and remembers
failures, so `podnetwork demo --check` can exit non-zero and list them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TextIO


class Verbosity(IntEnum):
    QUIET = 0
    """Section titles, failures and the summary only."""
    NORMAL = 1
    """The story: what was created, what each component decided."""
    DETAIL = 2
    """Also the objects and CNI results as JSON."""


@dataclass
class Report:
    """Sectioned output and the list of checks that failed."""

    verbosity: Verbosity = Verbosity.NORMAL
    show_checks: bool = False
    """Print each passing check (`--check`); failures are always printed."""
    out: TextIO = field(default_factory=lambda: sys.stdout)
    passed: int = 0
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    _section: str = ""

    def section(self, title: str) -> None:
        self._section = title
        self._write(f"\n== {title} ==", Verbosity.QUIET)

    def say(self, text: str = "") -> None:
        self._write(f"  {text}" if text else "", Verbosity.NORMAL)

    def always(self, text: str) -> None:
        """A line that even --quiet prints."""
        self._write(f"  {text}", Verbosity.QUIET)

    def detail(self, label: str, value: Any) -> None:
        if self.verbosity >= Verbosity.DETAIL:
            text = value if isinstance(value, str) else json.dumps(value, indent=2, sort_keys=True)
            self._write(f"  {label}:", Verbosity.DETAIL)
            for line in text.splitlines():
                self._write(f"      {line}", Verbosity.DETAIL)

    def check(self, ok: bool, what: str, observed: Any = None) -> bool:
        """Record one observation; `observed` is shown when it is wrong."""
        if ok:
            self.passed += 1
            if self.show_checks:
                self._write(f"  ok   {what}", Verbosity.NORMAL)
        else:
            shown = "" if observed is None else f" (observed: {_short(observed)})"
            self.failures.append(f"[{self._section}] {what}{shown}")
            self._write(f"  FAIL {what}{shown}", Verbosity.QUIET)
        return ok

    def skip(self, what: str) -> None:
        self.skipped.append(what)
        self._write(f"  skip {what}", Verbosity.QUIET)

    def summary(self) -> None:
        self._write("", Verbosity.QUIET)
        if self.failures:
            self._write(f"{len(self.failures)} check(s) FAILED, {self.passed} passed:", Verbosity.QUIET)
            for failure in self.failures:
                self._write(f"  - {failure}", Verbosity.QUIET)
        else:
            self._write(f"all {self.passed} checks passed", Verbosity.QUIET)
        if self.skipped:
            self._write(f"skipped: {'; '.join(self.skipped)}", Verbosity.QUIET)

    def _write(self, text: str, level: Verbosity) -> None:
        if self.verbosity >= level:
            print(text, file=self.out, flush=True)


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "..."
