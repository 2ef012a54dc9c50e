"""`podnetwork controller`: the PodNetwork controller and the pod admission webhooks.

One process runs the kopf operator (`podnetwork.controller`) and, unless
`--no-webhook`, serves the admission webhooks (`podnetwork.admission`) over
HTTPS with uvicorn. Heavy imports (kopf, uvicorn) happen in `run` only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from podnetwork import cli, constants, credentials, webhookserver

logger = logging.getLogger(__name__)

DESCRIPTION = """\
Run the KEP-3698 PodNetwork controller:

  - Ready and InUse conditions of every PodNetwork and PodNetworkAttachment
    (ParamsReady is the provider's), with lastTransitionTime and
    observedGeneration, and no write while nothing changes;
  - the finalizer multinetwork.x-k8s.io/in-use while pods or attachments
    reference an object, released as soon as the last one goes;
  - the `default` PodNetwork (created and re-created unless
    --disable-default-podnetwork-creation) and the DefaultPodNetworkReady
    condition of every node (per-node override: the node annotation
    multinetwork.x-k8s.io/default-podnetwork);
  - a requeue nudge for unscheduled pods when a network they wait for turns Ready;
  - a re-listing of PodNetworks and attachments every --resync-interval seconds
    that forgets objects deleted while a watch was down (pods are never listed);
  - pod admission on https://HOST:PORT/mutate-pods and /validate-pods:
    auto-population (namespace profile: multinetwork.x-k8s.io/default-networks;
    a namespace not seen yet is read once, and when that read fails the webhook
    answers 503 so its failurePolicy decides) and static validation with field
    errors. Request bodies over --webhook-max-body-bytes get 413 unread; a body
    that is not an AdmissionReview gets 400 naming the field; a pod of the wrong
    shape is refused in the answer (docs/controller.md "Limits and malformed
    requests").

Credentials: --kubeconfig, else the in-cluster service account, else $KUBECONFIG
or ~/.kube/config. Without --webhook-cert/--webhook-key a self-signed
certificate for --webhook-host is made with openssl; --manage-webhooks then
registers the webhook configurations with its CA bundle (development clusters;
deploy/controller/ has static manifests for production).

With --feature-gates MultiNetwork=false the controller watches nothing and
writes nothing, and admission allows every pod unchanged (KEP Phase I req. 1).

High availability: replicas started with --peering NAME --priority start-time
elect one active controller through kopf peering (the ClusterKopfPeering NAME;
deploy/peering/ has the CRDs and objects); the others pause but keep serving
admission (docs/controller.md "High availability").
"""


# Kept here too for callers of this module; they live in podnetwork.webhookserver.
WILDCARD_HOSTS = webhookserver.WILDCARD_HOSTS
Certificate = webhookserver.Certificate
self_signed = webhookserver.self_signed


def parse_feature_gates(text: str) -> dict[str, bool]:
    """`A=true,B=false` as kube components take it. Raises ValueError naming the bad part."""
    gates: dict[str, bool] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or not name.strip() or value.strip().lower() not in ("true", "false"):
            raise ValueError(f"invalid feature gate {part!r}: expected NAME=true or NAME=false")
        gates[name.strip()] = value.strip().lower() == "true"
    return gates


def multinetwork_enabled(gates: Mapping[str, bool]) -> bool:
    """The MultiNetwork gate; on unless set to false (this program exists to run it)."""
    return gates.get(constants.FEATURE_GATE, True)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig to use (default: in-cluster, "
                        "then $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--disable-default-podnetwork-creation", action="store_true",
                        help="do not create the `default` PodNetwork (KEP \"Manual creation\")")
    parser.add_argument("--default-provider", metavar="URL",
                        help="spec.provider of the `default` PodNetwork the controller creates")
    parser.add_argument("--feature-gates", default="", metavar="GATES",
                        help="e.g. MultiNetwork=false to make the controller and admission a no-op")
    parser.add_argument("--webhook-host", default="0.0.0.0", help="address to serve admission on")
    parser.add_argument("--webhook-port", type=int, default=9443, help="port to serve admission on")
    parser.add_argument("--webhook-cert", type=Path, help="TLS certificate (PEM) for the webhooks")
    parser.add_argument("--webhook-key", type=Path, help="TLS key (PEM) for the webhooks")
    parser.add_argument("--webhook-url", metavar="URL",
                        help="URL the API server uses to reach the webhooks, for --manage-webhooks "
                        "(default https://HOST:PORT)")
    parser.add_argument("--manage-webhooks", action="store_true",
                        help="create/update the Mutating- and ValidatingWebhookConfiguration")
    parser.add_argument("--no-webhook", action="store_true", help="do not serve admission")
    parser.add_argument("--webhook-max-body-bytes", type=webhookserver.byte_count,
                        default=webhookserver.MAX_BODY_BYTES, metavar="BYTES",
                        help="refuse larger admission request bodies with HTTP 413, before reading "
                        "them (default 3145728: 3 MiB, the API server's own cap on a request body)")
    parser.add_argument("--peering", metavar="NAME",
                        help="ClusterKopfPeering object for one active controller among replicas "
                        "(default: standalone; deploy/peering/ has the CRDs and the objects)")
    parser.add_argument("--priority", type=parse_priority, metavar="INT|start-time",
                        help="peering priority (needs --peering): the live replica with the highest "
                        "reconciles, the others pause; equal priorities pause all of them. "
                        "`start-time` makes it minus the start time in microseconds, so replicas of "
                        "one Deployment differ and the longest-running one stays active (default 0)")
    parser.add_argument("--inuse-message-interval", type=float, default=10.0, metavar="SECONDS",
                        help="coalescing period of InUse message updates (default 10)")
    parser.add_argument("--resync-interval", type=non_negative, default=300.0, metavar="SECONDS",
                        help="period of the re-listing of PodNetworks and attachments that forgets "
                        "objects deleted while a watch was down (kopf sends no DELETED for them); "
                        "0 disables (default 300)")


def non_negative(text: str) -> float:
    """A number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(
            f"invalid interval {text!r}: expected a number of seconds, 0 or more")
    return value


START_TIME = "start-time"


def parse_priority(text: str) -> int:
    """`--priority`: an integer, or `start-time` (minus the current time in microseconds).

    kopf pauses every replica that sees a live peer of higher priority, and all
    of them when two share the highest one (kopf docs "Peering", "Priorities"),
    so the replicas of one Deployment, which share their arguments, need a value
    that differs per process. An earlier start gives a higher priority: a new
    replica waits behind the running one instead of taking over from it.
    """
    if text == START_TIME:
        return -(time.time_ns() // 1_000)
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid priority {text!r}: expected an integer or {START_TIME!r}") from None


def peering_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `kopf.operator` that select standalone mode or peering.

    A peering name makes kopf's peering mandatory: without the ClusterKopfPeering
    object the operator stays paused rather than running unpeered beside another.
    """
    return {"standalone": args.peering is None, "peering_name": args.peering,
            "priority": args.priority}


def has_profile(body: Mapping[str, Any]) -> bool:
    """A Namespace that sets a networks profile (KEP Story #6)."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    return constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION in annotations


def any_object(_: Mapping[str, Any]) -> bool:
    """Keep every object: admission must tell an unseen namespace from one without a profile."""
    return True


async def mirror(settings: Any, resource: Any, cache: dict[str, dict[str, Any]],
                 keep: Callable[[Mapping[str, Any]], bool]) -> None:
    """Keep `cache` (name -> body) equal to the objects of the cluster-scoped `resource`
    that `keep` accepts, from a list+watch of its own (kopf's watch client, reconnects
    and 410 re-lists included) that peering never pauses.

    A replica paused by peering closes all of kopf's watches, so its controller
    never sees a namespace; admission, which every replica serves, still needs the
    profiles. After each (re-)listing the cache is replaced as a whole, so objects
    deleted while no watch was open leave it too; until then the old cache serves.
    """
    from kopf._cogs.clients import watching

    listing: dict[str, dict[str, Any]] = {}
    async for event in watching.infinite_watch(settings=settings, resource=resource, namespace=None):
        if event is watching.Bookmark.LISTED:
            for name in set(cache) - set(listing):
                del cache[name]
            cache.update(listing)
            listing = {}
            continue
        assert not isinstance(event, watching.Bookmark)
        kind, body = event["type"], dict(event["object"])
        name = (body.get("metadata") or {}).get("name")
        if kind == "BOOKMARK" or not name:
            continue
        if kind is None:
            if keep(body):
                listing[name] = body
        elif kind != "DELETED" and keep(body):
            cache[name] = body
        else:
            cache.pop(name, None)


async def retrying(what: str, run: Callable[[], Awaitable[None]], backoff: float = 10.0) -> None:
    """Run `run` again after an error: a side watch that ended on, say, a 403 would
    otherwise leave its cache or guard silently stale while the operator runs on."""
    while True:
        try:
            await run()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # logged, then retried: the operator must go on
            logger.error("%s failed (%s: %s); retrying in %ss", what, type(exc).__name__, exc, backoff)
            await asyncio.sleep(backoff)


def register_mirror(registry: Any, cache: dict[str, dict[str, Any]], *, plural: str = "namespaces",
                    keep: Callable[[Mapping[str, Any]], bool] = has_profile) -> None:
    """Mirror the core/v1 cluster-scoped objects `keep` accepts (by default the profiled
    Namespaces; the controller passes `any_object`) into `cache` while the operator of
    `registry` runs, paused or not: the watch starts from kopf's startup activity, which
    peering does not gate."""
    import kopf
    from kopf._cogs.structs import references

    resource = references.Resource(group="", version="v1", plural=plural, namespaced=False,
                                   verbs=frozenset({"list", "watch"}))
    task: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def start_namespace_mirror(settings: kopf.OperatorSettings, **_: Any) -> None:
        task.append(asyncio.create_task(retrying(
            f"watching {plural} for admission", lambda: mirror(settings, resource, cache, keep))))

    @kopf.on.cleanup(registry=registry)
    async def stop_namespace_mirror(**_: Any) -> None:
        for t in task:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t


def outranked(status: Mapping[str, Any], identity: str, priority: int) -> bool:
    """kopf's pausing rule over a peering object's `status`: some live peer other than
    `identity` has the same or a higher priority (kopf._core.engines.peering)."""
    from kopf._core.engines import peering

    for ident, info in status.items():
        if ident == identity or not isinstance(info, Mapping):
            continue
        peer = peering.Peer(identity=peering.Identity(ident), **info)
        if not peer.is_dead and peer.priority >= priority:
            return True
    return False


async def guard_demotion(settings: Any, identity: str, on_demoted: Callable[[], None]) -> None:
    """Call `on_demoted` when kopf pauses this replica after it has been the active one.

    A resumed replica keeps what it had in memory when it paused, and kopf's
    re-listing does not report the objects deleted meanwhile: the in-use index
    would keep pods that are gone, and their finalizers. A clean restart avoids
    that, and it comes back as a paused standby.
    """
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import references

    resource = references.Resource(group="kopf.dev", version="v1", plural="clusterkopfpeerings",
                                   namespaced=False, verbs=frozenset({"list", "watch"}))
    active = False
    async for event in watching.infinite_watch(settings=settings, resource=resource, namespace=None):
        if isinstance(event, watching.Bookmark) or event["type"] in ("BOOKMARK", "DELETED"):
            continue
        body = event["object"]
        if (body.get("metadata") or {}).get("name") != settings.peering.name:
            continue
        if not outranked(body.get("status") or {}, identity, settings.peering.priority):
            active = True
        elif active:
            on_demoted()
            return


def register_demotion_guard(registry: Any, identity: str, on_demoted: Callable[[], None]) -> None:
    """Run `guard_demotion` beside the operator of `registry` (which must use `identity`)."""
    import kopf

    task: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def start_demotion_guard(settings: kopf.OperatorSettings, **_: Any) -> None:
        task.append(asyncio.create_task(retrying(
            "watching the peering object", lambda: guard_demotion(settings, identity, on_demoted))))

    @kopf.on.cleanup(registry=registry)
    async def stop_demotion_guard(**_: Any) -> None:
        for t in task:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t


def _login(kubeconfig: str | None) -> Any:
    import kopf

    def login(**kwargs: Any) -> Any:
        if kubeconfig:
            os.environ["KUBECONFIG"] = kubeconfig
            return kopf.login_with_kubeconfig(**kwargs)
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    return login


async def serve(args: argparse.Namespace, *, stop: asyncio.Event | None = None) -> int:
    """Run what `args` asks for until `stop` is set (or SIGINT/SIGTERM)."""
    import kopf

    from podnetwork import admission, controller

    stop = stop or asyncio.Event()
    demoted = asyncio.Event()
    webhookserver.stop_on_signals(stop)
    gates = parse_feature_gates(args.feature_gates)
    enabled = multinetwork_enabled(gates)
    config = controller.ControllerSettings(
        create_default=not args.disable_default_podnetwork_creation,
        default_provider=args.default_provider,
        enabled=enabled,
        inuse_message_interval=args.inuse_message_interval,
        resync_interval=args.resync_interval,
    )
    ctl = controller.Controller(config=config)
    tasks: list[asyncio.Task[Any]] = []
    server: Any = None
    with tempfile.TemporaryDirectory(prefix="podnetwork-webhook-") as tmp:
        if not args.no_webhook:
            if bool(args.webhook_cert) != bool(args.webhook_key):
                raise SystemExit("--webhook-cert and --webhook-key go together")
            cert = webhookserver.certificate(args.webhook_cert, args.webhook_key, Path(tmp),
                                             args.webhook_host, args.webhook_url)
            app = admission.app(ctl.namespace, enabled=enabled, fetch_namespace=ctl.fetch_namespace)
            server = webhookserver.server(app, cert, max_body_bytes=args.webhook_max_body_bytes,
                                          host=args.webhook_host, port=args.webhook_port)
            tasks.append(asyncio.create_task(server.serve()))
            if args.manage_webhooks:
                ctl.webhook_client_config = webhookserver.client_config(
                    args.webhook_url, args.webhook_host, args.webhook_port, cert)
        if enabled:
            registry = kopf.OperatorRegistry()
            controller.register(registry, ctl)
            if args.peering is not None and not args.no_webhook and config.namespace_profiles:
                # Every namespace, not only profiled ones: admission reads an unseen one once.
                register_mirror(registry, ctl.namespaces, keep=any_object)
            identity = None
            if args.peering is not None:
                from kopf._core.engines import peering

                identity = peering.detect_own_id(manual=False)  # as kopf would, but known here

                def demote() -> None:
                    logger.error("another replica of peering %r outranks this one, which was "
                                 "active: exiting, to restart as a standby with a clean memory",
                                 args.peering)
                    demoted.set()
                    stop.set()

                register_demotion_guard(registry, identity, demote)
            kopf.on.login(registry=registry)(_login(args.kubeconfig))
            tasks.append(asyncio.create_task(kopf.operator(
                registry=registry, clusterwide=True, stop_flag=stop, identity=identity,
                **peering_options(args))))
        else:
            logger.warning("feature gate %s=false: the controller watches and writes nothing; "
                           "admission allows every pod unchanged", constants.FEATURE_GATE)
        await webhookserver.run_until_stopped(tasks, stop, server)
    return 1 if demoted.is_set() else 0


def _run(args: argparse.Namespace) -> int:
    try:
        parse_feature_gates(args.feature_gates)
    except ValueError as exc:
        print(f"podnetwork controller: {exc}")
        return 2
    if not args.no_webhook and webhookserver.unreachable_registration(
            args.manage_webhooks, args.webhook_url, args.webhook_host):
        print(f"podnetwork controller: --manage-webhooks registers https://{args.webhook_host}:"
              f"{args.webhook_port}, which the API server cannot call (and the webhooks fail closed: "
              "every pod would be refused); pass --webhook-url https://NAME:PORT with a name the API "
              "server reaches, or --webhook-host with such an address")
        return 2
    if args.priority is not None and args.peering is None:
        print("podnetwork controller: --priority only matters among peers: add --peering NAME "
              "(a ClusterKopfPeering object), or drop --priority")
        return 2
    if multinetwork_enabled(parse_feature_gates(args.feature_gates)):
        problem = credentials.login_problem(args.kubeconfig)
        if problem is not None:
            print(f"podnetwork controller: cannot reach a cluster: {problem}; pass --kubeconfig FILE "
                  "or run in a pod with a service account", file=sys.stderr)
            return 2
    return asyncio.run(serve(args))


command = cli.Command(
    help="run the PodNetwork controller (kopf) and pod admission webhooks",
    configure=_configure,
    run=_run,
    description=DESCRIPTION,
)
