"""`podnetwork dra-driver`: the kubelet plugin that serves PodNetworks as DRA devices on one node.

Heavy imports (grpc, lightkube) stay inside `run`, so `podnetwork --help` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TextIO

from podnetwork import cli
from podnetwork.kube import credentials

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

#: Repeated from `bridge.dracontract.names` so that `--help` imports nothing heavy.
DEFAULT_DRIVER = "dra.multinetwork.x-k8s.io"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"

DESCRIPTION = f"""\
A Dynamic Resource Allocation (resource.k8s.io/v1) driver for PodNetworks, run on
every node as a kubelet plugin. kube-scheduler's own DRA allocator then places a
pod whose ResourceClaims ask for PodNetworks on a node that offers them.

  - publishes one ResourceSlice pool per node (named after the node) with one
    device per PodNetwork the node offers (its multinetwork.x-k8s.io/podnetworks
    annotation; absent: all) that is Ready; each device has the attributes
    podNetwork and provider and allows many allocations (one device serves every
    pod of the node on that network); the slices follow the PodNetworks and the
    Node as they change;
  - registers with the kubelet (socket <registry-dir>/<driver>.sock) and
    serves DRAPlugin v1 at <plugins-dir>/<driver>/dra.sock: NodePrepareResources
    checks that each claim is allocated devices of this driver on this node and
    records it under --state-dir (kept across restarts); NodeUnprepareResources
    forgets it. Both are idempotent.

A claim asks for a PodNetwork with the driver's DeviceClass and a selector:
  deviceClassName: {DEFAULT_DRIVER}
  selectors: [{{cel: {{expression: 'device.attributes["{DEFAULT_DRIVER}"].podNetwork == "blue"'}}}}]

The DeviceClass is the administrator's to apply (the driver does not write it):
  podnetwork dra-driver --print-device-class | kubectl apply -f -

On SIGTERM the driver stops serving and removes its sockets; its ResourceSlices
stay, so a restart does not take the node's networks away. The kubelet deletes
them 30 s after the plugin went away unless it registers again (uninstall), and
deleting the Node deletes them (they name it as owner). See docs/dra.md.

exit status: 0 stopped by SIGTERM/SIGINT (or printed), 1 failed while running,
2 bad arguments, credentials or sockets (nothing was started)
"""


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""), metavar="NODE",
                        help="the Node this driver runs on (default $NODE_NAME)")
    parser.add_argument("--driver-name", default=DEFAULT_DRIVER, metavar="NAME",
                        help=f"the DRA driver name of the slices, claims and DeviceClass "
                        f"(default {DEFAULT_DRIVER})")
    parser.add_argument("--kubelet-plugins-dir", default=DEFAULT_PLUGINS_DIR, metavar="DIR",
                        help=f"the kubelet's plugins folder; the DRAPlugin socket goes in <DIR>/<driver>/ "
                        f"(default {DEFAULT_PLUGINS_DIR})")
    parser.add_argument("--kubelet-registry-dir", metavar="DIR",
                        help="the kubelet's plugin registration folder (default: plugins_registry beside "
                        f"--kubelet-plugins-dir, {DEFAULT_REGISTRY_DIR})")
    parser.add_argument("--state-dir", metavar="DIR",
                        help="where the prepared claims are recorded "
                        "(default <kubelet-plugins-dir>/<driver>)")
    parser.add_argument("--print-device-class", action="store_true",
                        help="print the driver's DeviceClass as YAML and exit")
    credentials.add_arguments(parser)


def _folders(args: argparse.Namespace) -> tuple[str, str, Path]:
    plugins = os.path.abspath(args.kubelet_plugins_dir)
    registry = os.path.abspath(args.kubelet_registry_dir or os.path.join(os.path.dirname(plugins),
                                                                          "plugins_registry"))
    state = Path(os.path.abspath(args.state_dir or os.path.join(plugins, args.driver_name)))
    return plugins, registry, state


def _problem(args: argparse.Namespace) -> str | None:
    from bridge.dracontract import names

    if problem := names.driver_name_problem(args.driver_name):
        return problem
    if args.print_device_class:
        return None
    if problem := names.node_name_problem(args.node_name):
        return problem
    plugins, registry, _ = _folders(args)
    registration = names.registration_socket(registry, args.driver_name)
    return (names.socket_problem(registration, "--kubelet-registry-dir")
            or names.socket_problem(names.plugin_socket(plugins, args.driver_name), "--kubelet-plugins-dir"))


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    if problem := _problem(args):
        print(f"podnetwork dra-driver: {problem}", file=err)
        return EXIT_USAGE
    if args.print_device_class:
        from bridge.dra.command import dump_yaml
        from bridge.dra.driver import classes

        out.write(dump_yaml([classes.device_class(args.driver_name).to_dict()]))
        return EXIT_OK
    cli.logs.operator_logging(args.verbose)
    try:
        creds = credentials.resolve(args.kubeconfig, args.context)
    except credentials.CredentialsError as exc:
        print(f"podnetwork dra-driver: cannot load cluster credentials: {exc}; pass --kubeconfig", file=err)
        return EXIT_USAGE
    try:
        return asyncio.run(_serve(args, creds))
    except OSError as exc:
        print(f"podnetwork dra-driver: {exc}", file=err)
        return EXIT_USAGE


async def _serve(args: argparse.Namespace, creds: credentials.Credentials) -> int:
    import grpc

    from bridge.dra.driver import plugin, publisher, reporter, wire
    from bridge.dracontract import names, state
    from podnetwork.kube import client as kube

    driver, node = args.driver_name, args.node_name
    plugins, registry, state_dir = _folders(args)
    endpoint = names.plugin_socket(plugins, driver)
    registration_path = names.registration_socket(registry, driver)
    api = kube.AsyncApi(creds)
    claims_api = kube.AsyncApi(creds, backoffs=(1, 2))
    publish = publisher.Publisher(api, driver=driver, node=node)
    store = state.Store(state_dir)
    service = plugin.Plugin(driver=driver, node=node, store=store, reader=publisher.ApiClaims(claims_api),
                            podnetwork_of=publish.podnetwork_of)
    report = reporter.Reporter(api, store, driver=driver, node=node)
    service.on_release = report.forget
    registration = plugin.Registration(driver, endpoint)
    logger.info("podnetwork dra-driver %s starting: driver %s on node %s; cluster %s; DRAPlugin at %s; "
                "registration at %s; state in %s (%d prepared claim(s) recorded)", cli.logs.version(), driver,
                node, creds.server, endpoint, registration_path, state_dir, len(store.uids()))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # the DRAPlugin service first: the kubelet calls the endpoint right after GetInfo
    dra_server = await wire.serve(wire.dra_handler(service), endpoint, wire.health_handler())
    registration_server: grpc.aio.Server | None = None
    publishing = asyncio.create_task(publish.run(), name="publish")
    reporting = asyncio.create_task(report.run(), name="report")
    failed = False
    try:
        registration_server = await wire.serve(wire.registration_handler(registration), registration_path)
        logger.info("serving; waiting for the kubelet to register %s (it watches %s)", driver, registry)
        stopping = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({stopping, publishing, reporting}, return_when=asyncio.FIRST_COMPLETED)
        for task, what in ((publishing, "publishing ResourceSlices"), (reporting, "writing networkData")):
            if task in done:
                failed = True
                logger.error("%s ended: %r", what, task.exception())
        stopping.cancel()
        logger.info("stopping: removing the registration socket (the kubelet deregisters the driver; it "
                    "deletes the node's slices of %s 30 s later unless the driver registers again)", driver)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(registration_path)
        if registration_server is not None:
            await registration_server.stop(1)
        await dra_server.stop(5)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(endpoint)
        for task in (publishing, reporting):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await api.close()
        await claims_api.close()
        logger.info("stopped")
    return EXIT_FAILED if failed else EXIT_OK


command = cli.Command(
    help="the DRA kubelet plugin: PodNetworks as ResourceSlice devices, prepared for kube-scheduler's DRA",
    description=DESCRIPTION,
    configure=_configure,
    run=lambda args: run(args),
)

__all__ = ["command", "run"]
