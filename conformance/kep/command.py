"""`podnetwork conformance`: run the KEP-3698 suite against the cluster of a kubeconfig and write
a ConformanceReport. Registered as an entry point of `podnetwork` (pyproject.toml)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import textwrap
from pathlib import Path
from typing import Any, TextIO

import yaml

from conformance.kep import SUITE_VERSION, features, report, suite
from conformance.kep import client as kc
from conformance.kep.tests import ALL, BY_NAME
from podnetwork.cli import Command, outputs
from podnetwork.cli.arguments import positive_seconds
from podnetwork.ground import constants
from podnetwork.kube import credentials

#: DRAPlacement's driver by default: this project's (`podnetwork dra-driver`, docs/dra.md); the suite
#: names it, not imports it, judging any driver through the API.
DRA_DRIVER = f"dra.{constants.GROUP}"
DRA_ATTRIBUTE = "podNetwork"

#: The NetworkPolicy tests' default image: Kubernetes' own e2e busybox, whose nc serves and probes.
PROBE_IMAGE = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"


def _feature_lines() -> str:
    lines = []
    for f in features.FEATURES:
        lines.append(f"  {f.name} ({f.level.value}{', opt-in' if f.opt_in else ''}): {f.summary}")
        lines.extend(textwrap.wrap("needs: " + "; ".join(f.needs), 88, initial_indent="      ",
                                   subsequent_indent="        "))
    return "\n".join(lines)


DESCRIPTION = f"""\
Run the KEP-3698 conformance suite (version {SUITE_VERSION}) against a cluster, through the
Kubernetes API only, and report per test: passed, failed, or skipped with the reason (a
component the test needs is absent). Each test runs in a namespace of its own and removes
what it made. Exit status: 0 when no test of a requested feature failed, 1 when one did,
2 on bad arguments or an unreachable cluster.

profiles: core = {", ".join(features.PROFILES["core"])};
          extended = core + {", ".join(f for f in features.PROFILES["extended"]
                                       if f not in features.PROFILES["core"])}
opt-in (in no profile, run with --features): {", ".join(features.OPT_IN)}

features:
{_feature_lines()}

Pods name their networks in the annotation {constants.NETWORKS_ANNOTATION} (a JSON list of
the KEP's Network), as Pod.spec.networks does not exist yet (docs/conformance.md).
"""


def _configure(parser: argparse.ArgumentParser) -> None:
    credentials.add_arguments(parser)
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--profile", choices=sorted(features.PROFILES), help="run the features of a profile "
                        "(default: core)")
    chosen.add_argument("--features", metavar="A,B", help="run exactly these features (comma-separated)")
    parser.add_argument("--skip-tests", metavar="T1,T2", default="",
                        help="tests not to run (reported as skipped, with that reason)")
    parser.add_argument("--list", action="store_true", help="list the tests and their features, and exit")
    parser.add_argument("--report", metavar="FILE", help="write the ConformanceReport here (.json: JSON, "
                        "else YAML); needs --implementation-name, -version and -url")
    parser.add_argument("--implementation-name", metavar="NAME")
    parser.add_argument("--implementation-version", metavar="VERSION")
    parser.add_argument("--implementation-url", metavar="URL")
    parser.add_argument("--implementation-contact", metavar="WHO", action="append", default=[],
                        help="a contact (GitHub handle, e-mail); may repeat")
    parser.add_argument("--mode", default="default",
                        help="a name for how the cluster was set up, in the report")
    parser.add_argument("--npwg-provider", metavar="URL", default=constants.BRIDGE_PROVIDER,
                        help="spec.provider of the NPWGBridge tests' PodNetworks "
                             f"(default {constants.BRIDGE_PROVIDER})")
    parser.add_argument("--scheduler-name", metavar="NAME", default="",
                        help="spec.schedulerName of the suite's pods (default: the cluster's default "
                             "scheduler)")
    parser.add_argument("--probe-image", metavar="IMAGE", default=PROBE_IMAGE,
                        help="the pods of the NetworkPolicy, PrimaryPodNetwork and ServiceClusterIP tests: a "
                             "busybox with nc "
                             f"(default {PROBE_IMAGE})")
    parser.add_argument("--policy-network", metavar="NAME", default="",
                        help="the PodNetwork the NetworkPolicy tests run on: Ready, and attached to pods by "
                             "the cluster (default: none, the tests are skipped saying so)")
    parser.add_argument("--primary-network", metavar="NAME", default="",
                        help="the PodNetwork the PrimaryPodNetwork tests run pods on alone: Ready, attached "
                             "to pods by the cluster, its pods reachable from the nodes (default: none, the "
                             "tests are skipped saying so)")
    parser.add_argument("--service-network", metavar="NAME", default="",
                        help="the PodNetwork the ServiceClusterIP test runs backends and a client on: Ready, "
                             "attached to pods by the cluster (default: none, the test is skipped saying so)")
    parser.add_argument("--dra-driver", metavar="NAME", default=DRA_DRIVER,
                        help="DRAPlacement: the DRA driver that serves PodNetworks as devices "
                             f"(default {DRA_DRIVER})")
    parser.add_argument("--dra-attribute", metavar="NAME", default=DRA_ATTRIBUTE,
                        help="DRAPlacement: the device attribute (in the driver's domain) holding the "
                             f"PodNetwork's name (default {DRA_ATTRIBUTE})")
    parser.add_argument("--dra-device-class", metavar="NAME", default="",
                        help="DRAPlacement: the DeviceClass of the driver's devices (default: the driver's "
                             "name)")
    parser.add_argument("--dra-network", metavar="NAME", default="",
                        help="DRANetworkData: a Ready PodNetwork the cluster attaches to pods, to attach one "
                             "through a claim (default: none, the test is skipped saying so)")
    timeouts = kc.Timeouts()
    parser.add_argument("--request-timeout", type=positive_seconds, metavar="S", default=timeouts.request,
                        help=f"seconds per API request (default {timeouts.request:g})")
    parser.add_argument("--settle-timeout", type=positive_seconds, metavar="S", default=timeouts.settle,
                        help="seconds a controller has to act, e.g. set a condition "
                             f"(default {timeouts.settle:g})")
    parser.add_argument("--schedule-timeout", type=positive_seconds, metavar="S", default=timeouts.schedule,
                        help=f"seconds for a pod to be bound or held back (default {timeouts.schedule:g})")


class BadArguments(ValueError):
    pass


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def selection(args: argparse.Namespace) -> tuple[tuple[str, ...], list[suite.ConformanceTest], list[str]]:
    """(features requested, tests to run, tests excluded by --skip-tests). Raises `BadArguments`."""
    try:
        requested = (features.resolve(_names(args.features)) if args.features
                     else features.PROFILES[args.profile or "core"])
    except features.UnknownFeature as exc:
        raise BadArguments(f"--features: {exc}") from None
    if not requested:
        raise BadArguments("--features names no feature")
    excluded = _names(args.skip_tests)
    unknown = [t for t in excluded if t not in BY_NAME]
    if unknown:
        raise BadArguments(f"--skip-tests: unknown test(s) {', '.join(unknown)}; see --list")
    chosen = [t for t in ALL if set(t.features) <= set(requested)]
    return requested, chosen, excluded


def _progress(out: TextIO) -> suite.Progress:
    def show(index: int, total: int, test: suite.ConformanceTest, result: suite.TestResult | None) -> None:
        if result is None:
            out.write(f"[{index:>2}/{total}] {test.name} ... ")
        else:
            detail = f": {result.message}" if result.message else ""
            out.write(f"{result.outcome.value.upper()} ({result.seconds:g}s){detail}\n")
        out.flush()
    return show


async def execute(args: argparse.Namespace, creds: credentials.Credentials, out: TextIO
                  ) -> tuple[dict[str, Any], list[suite.TestResult]]:
    requested, chosen, excluded = selection(args)
    timeouts = kc.Timeouts(request=args.request_timeout, settle=args.settle_timeout,
                           schedule=args.schedule_timeout)
    client = kc.Client(creds, timeouts)
    try:
        try:
            version = await client.get_path("/version")
        except kc.ApiError as exc:
            raise BadArguments(f"cannot reach the cluster at {creds.describe}: {exc}") from None
        if not isinstance(version, dict):
            raise BadArguments(f"cannot reach the cluster at {creds.describe}: get /version: the answer is a "
                               f"JSON {type(version).__name__}, not the object a Kubernetes API server "
                               "sends; does the kubeconfig's server name one?")
        out.write(f"KEP-3698 conformance {SUITE_VERSION} against {creds.describe}, Kubernetes "
                  f"{version.get('gitVersion', '?')}; features: {', '.join(requested)}\n")
        to_run = [t for t in chosen if t.name not in excluded]
        results = await suite.run(to_run, client, settings={"NPWG_PROVIDER": args.npwg_provider,
                                                            "SCHEDULER_NAME": args.scheduler_name,
                                                            "PROBE_IMAGE": args.probe_image,
                                                            "POLICY_NETWORK": args.policy_network,
                                                            "PRIMARY_NETWORK": args.primary_network,
                                                            "SERVICE_NETWORK": args.service_network,
                                                            "DRA_DRIVER": args.dra_driver,
                                                            "DRA_ATTRIBUTE": args.dra_attribute,
                                                            "DRA_DEVICE_CLASS": args.dra_device_class,
                                                            "DRA_NETWORK": args.dra_network},
                                  progress=_progress(out))
    finally:
        await client.close()
    by_name = {r.name: r for r in results}
    ordered = [by_name.get(t.name) or suite.TestResult(t.name, t.features, suite.Outcome.SKIPPED,
                                                       "excluded with --skip-tests") for t in chosen]
    implementation = report.Implementation(args.implementation_name or "unnamed",
                                           args.implementation_version or "unknown",
                                           args.implementation_url or "not given",
                                           tuple(args.implementation_contact))
    built = report.build(ordered, implementation=implementation, requested=requested,
                         kubernetes_version=str(version.get("gitVersion") or "unknown"), mode=args.mode,
                         excluded=[t for t in excluded if any(c.name == t for c in chosen)])
    return built, ordered


def report_text(path: Path, document: dict[str, Any]) -> str:
    """The report as JSON when `path` ends in .json, else YAML."""
    return (json.dumps(document, indent=2) + "\n" if path.suffix == ".json"
            else yaml.safe_dump(document, sort_keys=False, width=110))


def write_report(path: Path, document: dict[str, Any]) -> None:
    """Raises `outputs.OutputError`."""
    outputs.write(path, report_text(path, document), "--report")


def save_report(path: Path, document: dict[str, Any], out: TextIO, err: TextIO) -> bool:
    """Writes the report; when that fails at the end of a run (the path was checked before it,
    but a disk fills, a directory goes), says why and prints the report on `out` instead, so
    the results of the run are not lost. Whether the file was written."""
    try:
        write_report(path, document)
    except outputs.OutputError as exc:
        err.write(f"podnetwork conformance: {exc}; the report follows on standard output\n")
        out.write(report_text(path, document))
        return False
    out.write(f"report written to {path}\n")
    return True


def _list(out: TextIO) -> None:
    for f in features.FEATURES:
        out.write(f"{f.name} ({f.level.value}) - {f.summary}\n")
        for t in ALL:
            if f.name in t.features:
                out.write(f"    {t.name}: {t.description} [{t.spec}]\n")


def _run(args: argparse.Namespace) -> int:
    out = sys.stdout
    if args.list:
        try:
            selection(args)  # a name --list would not show is refused here too
        except BadArguments as exc:
            sys.stderr.write(f"podnetwork conformance: {exc}\n")
            return 2
        _list(out)
        return 0
    named = args.implementation_name and args.implementation_version and args.implementation_url
    if args.report is not None and not named:
        sys.stderr.write("podnetwork conformance: --report needs --implementation-name, "
                         "--implementation-version and --implementation-url (who the report is about)\n")
        return 2
    # Before the run, which takes minutes: its results must have somewhere to go.
    if args.report is not None and (problem := outputs.problem(args.report, "--report")):
        sys.stderr.write(f"podnetwork conformance: {problem}\n")
        return 2
    try:
        selection(args)
        creds = credentials.resolve(args.kubeconfig, args.context)
        document, _ = asyncio.run(execute(args, creds, out))
    except (BadArguments, credentials.CredentialsError) as exc:
        sys.stderr.write(f"podnetwork conformance: {exc}\n")
        return 2
    for profile in document["profiles"]:
        out.write(f"{profile['name']}: {profile['result']} ({profile['summary']})\n")
    if args.report is not None and not save_report(Path(args.report), document, out, sys.stderr):
        return 2
    return 1 if report.failed(document) else 0


command = Command(
    help="run the KEP-3698 conformance suite against a cluster and write a ConformanceReport",
    configure=_configure,
    run=_run,
    description=DESCRIPTION,
)
