"""The suite's records, the context a test runs in, and the runner.

A test is a record: a short name, a description, the features it belongs to, the
KEP section it checks, its manifests (YAML files in `tests/manifests/`) and an async
function. Each test runs in a namespace of its own and removes what it made, also
when it fails. A test that cannot be set up because a component is absent raises
`Skip` with the reason; the runner reports it skipped, never failed.
"""

from __future__ import annotations

import secrets
import string
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from typing import Any, NoReturn

import yaml

from conformance.kep import client as kc
from podnetwork.kube import client as kube


class Skip(Exception):
    """The test cannot be set up on this cluster; the message is the reason."""


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


TestFunction = Callable[["Context"], Awaitable[None]]


@dataclass(frozen=True)
class ConformanceTest:
    name: str
    description: str
    features: tuple[str, ...]
    spec: str
    """Where the rule comes from: KEP-3698 "Section" or Req N."""
    run: TestFunction
    manifests: tuple[str, ...] = ()
    namespace_annotations: dict[str, str] = field(default_factory=dict)
    """Annotations of the test's namespace (`${...}` placeholders allowed)."""


@dataclass(frozen=True)
class TestResult:
    name: str
    features: tuple[str, ...]
    outcome: Outcome
    message: str = ""
    seconds: float = 0.0
    cleanup: str = ""
    """What could not be removed afterwards, if anything."""


MANIFESTS = "conformance.kep.tests.manifests"


def load_manifest(name: str, values: dict[str, str]) -> list[dict[str, Any]]:
    """The documents of manifest `name`, with `${KEY}` replaced from `values` (a missing key is an error)."""
    text = resources.files(MANIFESTS).joinpath(name).read_text()
    docs = yaml.safe_load_all(string.Template(text).substitute(values))
    return [d for d in docs if d]


class Context:
    """What a test uses: the client, its namespace, names unique to this run, and cleanup."""

    def __init__(self, test: ConformanceTest, client: kc.Client, probes: dict[str, str | None],
                 settings: dict[str, str]) -> None:
        self.test = test
        self.client = client
        self.timeouts = client.timeouts
        self.probes = probes
        self.settings = settings
        suffix = secrets.token_hex(3)
        self.suffix = suffix
        self.namespace = f"kep-{test.name.lower()}"[:55].rstrip("-") + f"-{suffix}"
        self.values = {"NAMESPACE": self.namespace, "SUFFIX": suffix, **settings}
        self._made: list[tuple[kc.Resource, str, str | None]] = []
        self._undo: list[Callable[[], Awaitable[object]]] = []

    def name(self, base: str) -> str:
        """A cluster-unique name for a cluster-scoped object of this test."""
        return f"{base}-{self.suffix}"

    def on_cleanup(self, undo: Callable[[], Awaitable[object]]) -> None:
        """Run `undo()` at cleanup, before the objects are deleted (latest first): to put back a change
        the test made to an object it did not create."""
        self._undo.append(undo)

    def skip(self, reason: str) -> NoReturn:
        raise Skip(reason)

    def manifest(self, name: str, **values: str) -> list[dict[str, Any]]:
        return load_manifest(name, {**self.values, **values})

    async def create(self, resource: kc.Resource, body: dict[str, Any]) -> dict[str, Any]:
        """Create and remember for cleanup."""
        meta = body.setdefault("metadata", {})
        if resource is kube.Pod and self.settings.get("SCHEDULER_NAME"):
            # A cluster may run the multi-network scheduler beside the default one.
            body.setdefault("spec", {}).setdefault("schedulerName", self.settings["SCHEDULER_NAME"])
        if kube.namespaced(resource):
            meta.setdefault("namespace", self.namespace)
        created = await self.client.create(resource, body)
        self._made.append((resource, str(meta["name"]), meta.get("namespace") if kube.namespaced(resource)
                           else None))
        return created

    async def apply(self, manifest: str, **values: str) -> list[dict[str, Any]]:
        """Create every object of a manifest, in order."""
        made = []
        for doc in self.manifest(manifest, **values):
            resource = kube.BY_KIND.get(str(doc.get("kind")))
            if resource is None:
                raise ValueError(f"manifest {manifest}: kind {doc.get('kind')!r} is not one the suite knows")
            made.append(await self.create(resource, doc))
        return made

    async def setup_namespace(self) -> None:
        annotations = {k: string.Template(v).substitute(self.values)
                       for k, v in self.test.namespace_annotations.items()}
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        if annotations:
            body["metadata"]["annotations"] = annotations
        await self.client.create(kc.Namespace, body)

    async def cleanup(self) -> str:
        """Delete what the test made (pods first, so finalizers can go), then the namespace, and wait
        until each object is gone. Returns what is left, or ""."""
        order = {"Pod": 0, "PodNetworkAttachment": 1}
        made = sorted(reversed(self._made), key=lambda m: order.get(kube.kind_of(m[0]), 2))
        left: list[str] = []
        for undo in reversed(self._undo):
            try:
                await undo()
            except kc.ApiError as exc:
                left.append(f"undoing a change: {exc}")
        for resource, name, namespace in made:
            try:
                await self.client.delete(resource, name, namespace)
                await self.client.eventually(
                    f"{kube.kind_of(resource)} {name} deleted",
                    lambda r=resource, n=name, ns=namespace: self._gone(r, n, ns))  # type: ignore[misc]
            except (kc.ApiError, kc.TimedOut) as exc:
                left.append(f"{kube.kind_of(resource)} {name}: {exc}")
        try:
            await self.client.delete(kc.Namespace, self.namespace)
        except kc.ApiError as exc:
            left.append(f"Namespace {self.namespace}: {exc}")
        return "; ".join(left)

    async def _gone(self, resource: kc.Resource, name: str, namespace: str | None) -> bool:
        return await self.client.get(resource, name, namespace) is None

    async def probe(self, name: str, check: Callable[[Context], Awaitable[str | None]]) -> None:
        """Run probe `name` once per suite run (its answer is kept): None if the component is there,
        else the reason, which skips this test and every later one that asks."""
        if name not in self.probes:
            self.probes[name] = await check(self)
        reason = self.probes[name]
        if reason is not None:
            self.skip(reason)


Progress = Callable[[int, int, "ConformanceTest", TestResult | None], None]


async def run(tests: Sequence[ConformanceTest], client: kc.Client, *, settings: dict[str, str] | None = None,
              progress: Progress | None = None) -> list[TestResult]:
    """Run `tests` one after the other; every outcome is recorded, none stops the run."""
    probes: dict[str, str | None] = {}
    results: list[TestResult] = []
    for index, test in enumerate(tests, 1):
        if progress:
            progress(index, len(tests), test, None)
        result = await run_one(test, client, probes, settings or {})
        results.append(result)
        if progress:
            progress(index, len(tests), test, result)
    return results


async def run_one(test: ConformanceTest, client: kc.Client, probes: dict[str, str | None],
                  settings: dict[str, str]) -> TestResult:
    ctx = Context(test, client, probes, settings)
    started = time.monotonic()
    outcome, message = Outcome.PASSED, ""
    try:
        await ctx.setup_namespace()
        await test.run(ctx)
    except Skip as exc:
        outcome, message = Outcome.SKIPPED, str(exc)
    except AssertionError as exc:
        outcome, message = Outcome.FAILED, str(exc) or "assertion failed"
    except kc.ApiError as exc:
        outcome, message = Outcome.FAILED, f"unexpected API answer: {exc}"
    except Exception as exc:
        outcome, message = Outcome.FAILED, f"{type(exc).__name__}: {exc}"
    cleanup = await ctx.cleanup()
    seconds = round(time.monotonic() - started, 2)
    return TestResult(test.name, test.features, outcome, message, seconds, cleanup)
