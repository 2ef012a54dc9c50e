"""One CNI request as the shim forwards it (the runtime's environment and stdin), validated
before anything else looks at it (`parse_request`), with where its time goes (`Phases`)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge import npwg
from bridge.agent.delegates import invoke
from bridge.agent.delegates.invoke import CNIError, Command, ErrorCode, RuntimeArgs


class Phases:
    """Where one request's time went, for its log line (`benchmarks/bench_agent.py` reads it).

    Spans of the same name add up (the cache is written before each delegate)."""

    def __init__(self) -> None:
        self.spans: dict[str, float] = {}

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.spans[name] = self.spans.get(name, 0.0) + time.perf_counter() - start

    def __str__(self) -> str:
        return ", ".join(f"{name} {seconds * 1000:.2f}" for name, seconds in self.spans.items())


@dataclass
class Request:
    """A CNI request, validated: its runtime arguments, its configuration, the pod it names."""

    args: RuntimeArgs
    conf: dict[str, Any]
    cni_version: str
    pod_namespace: str | None
    pod_name: str | None
    runtime_config: dict[str, Any] = field(default_factory=dict)
    phases: Phases = field(default_factory=Phases)


def parse_request(env: Mapping[str, str], stdin: bytes) -> Request:
    """A forwarded CNI request -> validated parameters; CNI error 4/6/7/1 when it is malformed."""
    command = _command(env)
    conf = _configuration(stdin)
    version = conf.get("cniVersion", invoke.LATEST_VERSION)
    if command is not Command.VERSION and version not in invoke.SUPPORTED_VERSIONS:
        raise CNIError(
            ErrorCode.INCOMPATIBLE_VERSION,
            f"unsupported cniVersion {version!r}",
            f"the agent speaks {', '.join(invoke.SUPPORTED_VERSIONS)}",
        )
    # why: the agent keeps pydantic out (its RSS); the CNI config is JSON checked key by key
    runtime_config = conf.get("runtimeConfig") or {}
    if not isinstance(runtime_config, dict):
        raise CNIError(
            ErrorCode.INVALID_CONFIG, "invalid network configuration", '"runtimeConfig" must be an object'
        )
    args = _runtime_args(command, env)
    namespace, name = _pod(args)
    return Request(args, conf, version, namespace, name, runtime_config)


def _command(env: Mapping[str, str]) -> Command:
    raw_command = env.get("CNI_COMMAND", "")
    try:
        return Command(raw_command)
    except ValueError:
        raise CNIError(
            ErrorCode.INVALID_ENVIRONMENT,
            "invalid CNI_COMMAND",
            f"{raw_command!r}; expected one of {', '.join(c.value for c in Command)}",
        ) from None


def _configuration(stdin: bytes) -> dict[str, Any]:
    try:
        conf = json.loads(stdin) if stdin.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise CNIError(
            ErrorCode.DECODING_FAILURE, "network configuration is not valid JSON", str(exc)
        ) from None
    if not isinstance(conf, dict):
        raise CNIError(ErrorCode.DECODING_FAILURE, "network configuration must be a JSON object")
    return conf


def _runtime_args(command: Command, env: Mapping[str, str]) -> RuntimeArgs:
    """The CNI variables, checked for what the command needs of them."""
    try:
        cni_args = invoke.parse_cni_args(env.get("CNI_ARGS", ""))
    except CNIError:
        if command is not Command.DEL:
            raise
        cni_args = ()  # DEL reads only the container's record; the pod is named in logs only
    if not any(k == "IgnoreUnknown" for k, _ in cni_args):
        # Delegates must accept the pod's K8S_* args they do not know, as under the kubelet.
        cni_args = (("IgnoreUnknown", "1"), *cni_args)
    args = RuntimeArgs(
        command,
        env.get("CNI_CONTAINERID", ""),
        env.get("CNI_NETNS", ""),
        env.get("CNI_IFNAME", ""),
        cni_args,
    )
    if command in (Command.ADD, Command.DEL, Command.CHECK):
        # DEL needs only the container ID: its record has the rest.
        required = (("CNI_CONTAINERID", args.container_id),) if command is Command.DEL else (
            ("CNI_CONTAINERID", args.container_id), ("CNI_IFNAME", args.ifname))
        for var, value in required:
            if not value:
                raise CNIError(ErrorCode.INVALID_ENVIRONMENT, f"{var} is required for {command.value}")
        # DEL takes any ID and interface name: one that ADD refuses was never attached (no agent
        # could write its record, or hand the name to a plugin), so its DEL succeeds; refusing it
        # would keep the pod forever (CRI: tear-down must eventually succeed).
        if command is not Command.DEL:
            invoke.check_container_id(args.container_id)
            invoke.check_ifname(args.ifname)
    if command in (Command.ADD, Command.CHECK) and not args.netns:
        raise CNIError(ErrorCode.INVALID_ENVIRONMENT, f"CNI_NETNS is required for {command.value}")
    if args.netns and not os.path.isabs(args.netns):
        raise CNIError(ErrorCode.INVALID_ENVIRONMENT, "CNI_NETNS must be an absolute path", args.netns)
    return args


def _pod(args: RuntimeArgs) -> tuple[str | None, str | None]:
    """(namespace, name) of the pod CNI_ARGS names, required and checked for ADD."""
    namespace, name = args.arg("K8S_POD_NAMESPACE"), args.arg("K8S_POD_NAME")
    if args.command is Command.ADD and not (namespace and name):
        raise CNIError(
            ErrorCode.INVALID_ENVIRONMENT,
            "CNI_ARGS must name the pod",
            "K8S_POD_NAMESPACE and K8S_POD_NAME are required for ADD (the kubelet sets them)",
        )
    problems = pod_ref_problems(namespace, name)
    if args.command is Command.ADD and problems:
        var, value, problem = problems[0]
        raise CNIError(
            ErrorCode.INVALID_ENVIRONMENT,
            f"invalid {var} in CNI_ARGS",
            f"{value[:80]!r} {problem}; it must name the pod as the Kubernetes API does (the kubelet "
            "sets it from the pod)",
        )
    if problems:
        # Only ADD reads the pod; elsewhere the names are just logged, so a bad one is dropped
        # rather than failing a DEL (tear-down must eventually succeed).
        return None, None
    return namespace, name


def pod_ref_problems(namespace: str | None, name: str | None) -> list[tuple[str, str, str]]:
    """(variable, value, problem) for each given pod reference that is not a Kubernetes name.

    They become a path of the API request: an unchecked `..` would make the HTTP client
    collapse `/namespaces/<ns>/pods/..` into the Namespace itself, `.` into the pod list.
    """
    problems: list[tuple[str, str, str]] = []
    if namespace is not None and (problem := npwg.name_problem(namespace, max_length=npwg.NAMESPACE_MAX)):
        problems.append(("K8S_POD_NAMESPACE", namespace, f"is not a namespace name: it {problem}"))
    if name is not None and (problem := npwg.subdomain_problem(name)):
        problems.append(("K8S_POD_NAME", name, f"is not a pod name: it {problem}"))
    return problems


__all__ = ["Phases", "Request", "parse_request", "pod_ref_problems"]
