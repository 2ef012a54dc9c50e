"""`podnetwork controller`: the PodNetwork controller and the pod admission webhooks.

One process runs the kopf operator (`podnetwork.kep.controller`) and, unless
`--no-webhook`, serves the admission webhooks (`podnetwork.kep.admission`) over
HTTPS with uvicorn. Heavy imports (kopf, uvicorn) happen in `run` only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from podnetwork import cli
from podnetwork.cli import arguments, logs, operatorshell

# Shared with `podnetwork bridge` (operatorshell); importable from here as before.
from podnetwork.cli.arguments import START_TIME as START_TIME
from podnetwork.cli.arguments import parse_priority as parse_priority
from podnetwork.cli.operatorshell import register_demotion_guard as register_demotion_guard
from podnetwork.cli.operatorshell import retrying as retrying
from podnetwork.ground import constants
from podnetwork.ground.core import ObjectMeta, PartialObjectMetadata
from podnetwork.kube import credentials

if TYPE_CHECKING:
    from podnetwork.cli import metrics as kube_metrics
    from podnetwork.kube import client as kube

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
    errors; with --enforce-use-permission, a new pod may name a PodNetwork
    other than `default` only when its requester or its ServiceAccount may
    `use` it (RBAC, SubjectAccessReview; 503 when the API cannot answer).
    Request bodies over --webhook-max-body-bytes get 413 unread; a body
    that is not an AdmissionReview gets 400 naming the field; a pod of the wrong
    shape is refused in the answer (docs/controller.md "Limits and malformed
    requests").

Credentials: --kubeconfig/--context, $KUBECONFIG, the in-cluster service account,
~/.kube/config, in this order (docs/architecture.md "Reaching the API").
Webhook certificates and registration (docs/deploy.md "Webhook certificates"):
without --webhook-cert/--webhook-key a self-signed certificate for --webhook-host
and the host of --webhook-url is made at start, and --manage-webhooks registers
the webhook configurations at that URL with its CA bundle (development clusters).
deploy/controller/ runs --manage-webhooks --webhook-service NAMESPACE/NAME
--webhook-secret NAME: the replicas keep one CA and serving certificate in that
Secret (created when missing, renewed before expiry, reloaded when it changes)
and register the configurations at the Service once they answer, never before.

With --feature-gates MultiNetwork=false the controller watches nothing and
writes nothing, and admission allows every pod unchanged (KEP Phase I req. 1).

High availability: replicas started with --peering NAME --priority start-time
elect one active controller through kopf peering (the ClusterKopfPeering NAME;
deploy/peering/ has the CRDs and objects); the others pause but keep serving
admission (docs/controller.md "High availability").

exit status: 0 after a clean stop (SIGINT/SIGTERM: kopf and the webhooks stop
together), 1 when demoted by a peer, 2 on bad arguments, a webhook port in use,
an unusable certificate or no cluster
"""

COMMAND = "podnetwork controller"
#: Who manages what this command registers (the managed-by label; deploy/'s ClusterRole name).
COMPONENT = "podnetwork-controller"


def parse_feature_gates(text: str) -> dict[str, bool]:
    """`A=true,B=false` as kube components take it, of the one gate this controller knows. Raises
    ValueError naming the bad part."""
    gates: dict[str, bool] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or not name.strip() or value.strip().lower() not in ("true", "false"):
            raise ValueError(f"invalid feature gate {part!r}: expected NAME=true or NAME=false")
        if name.strip() != constants.FEATURE_GATE:
            # As kube components refuse an unrecognized gate: a misspelt MultiNetwork=false
            # would otherwise leave the controller on.
            raise ValueError(f"unknown feature gate {name.strip()!r}; known gates: {constants.FEATURE_GATE}")
        gates[name.strip()] = value.strip().lower() == "true"
    return gates


def multinetwork_enabled(gates: Mapping[str, bool]) -> bool:
    """The MultiNetwork gate; on unless set to false (this program exists to run it)."""
    return gates.get(constants.FEATURE_GATE, True)


def _configure(parser: argparse.ArgumentParser) -> None:
    credentials.add_arguments(parser)
    parser.add_argument("--disable-default-podnetwork-creation", action="store_true",
                        help="do not create the `default` PodNetwork (KEP \"Manual creation\")")
    parser.add_argument("--default-provider", metavar="URL",
                        help="spec.provider of the `default` PodNetwork the controller creates")
    parser.add_argument("--feature-gates", default="", metavar="GATES",
                        help="e.g. MultiNetwork=false to make the controller and admission a no-op")
    operatorshell.add_webhook_arguments(parser, default_port=9443)
    arguments.add_metrics_arguments(parser)
    parser.add_argument("--no-webhook", action="store_true", help="do not serve admission")
    parser.add_argument("--enforce-use-permission", action="store_true",
                        help="refuse a new pod naming a PodNetwork (or an attachment of one) other than "
                        "`default` unless its requester or its ServiceAccount may `use` that PodNetwork "
                        "(RBAC verb use on podnetworks, checked with SubjectAccessReviews); off by default "
                        "so that an upgrade does not refuse pods before the RoleBindings exist "
                        "(docs/controller.md \"Permission to use a PodNetwork\")")
    parser.add_argument("--peering", metavar="NAME",
                        help="ClusterKopfPeering object for one active controller among replicas "
                        "(default: standalone; deploy/peering/ has the CRDs and the objects)")
    parser.add_argument("--priority", type=parse_priority, metavar="INT|start-time",
                        help="peering priority (needs --peering): the live replica with the highest "
                        "reconciles, the others pause; equal priorities pause all of them. "
                        "`start-time` ranks replicas by their arrival in the peering object (the first "
                        "leads, each later one waits below every live one), so replicas of one "
                        "Deployment differ and none acts before it knows it leads (default 0)")
    parser.add_argument("--inuse-message-interval", type=arguments.non_negative_seconds, default=10.0,
                        metavar="SECONDS",
                        help="coalescing period of InUse message updates (default 10)")
    parser.add_argument("--resync-interval", type=arguments.non_negative_seconds, default=300.0,
                        metavar="SECONDS",
                        help="period of the re-listing of PodNetworks and attachments that forgets "
                        "objects deleted while a watch was down (kopf sends no DELETED for them); "
                        "0 disables (default 300)")


def peering_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `kopf.operator` that select standalone mode or peering.

    A peering name makes kopf's peering mandatory: without the ClusterKopfPeering
    object the operator stays paused rather than running unpeered beside another.
    """
    return {"standalone": args.peering is None, "peering_name": args.peering,
            "priority": args.priority}


def _metadata(body: Mapping[str, Any]) -> ObjectMeta | None:
    """The metadata of a watched object, or None when it cannot be read (the API server never
    serves such an object; one that does not fit is left out, as one without a name)."""
    try:
        return PartialObjectMetadata.model_validate(body).metadata
    except ValueError:
        return None


def has_profile(body: Mapping[str, Any]) -> bool:
    """A Namespace that sets a networks profile (KEP Story #6)."""
    meta = _metadata(body)
    return meta is not None and meta.annotation(constants.NAMESPACE_DEFAULT_NETWORKS_ANNOTATION) is not None


def any_object(_: Mapping[str, Any]) -> bool:
    """Keep every object: admission must tell an unseen namespace from one without a profile."""
    return True


async def mirror(api: kube.AsyncApi, resource: kube.Resource, cache: dict[str, dict[str, Any]],
                 keep: Callable[[Mapping[str, Any]], bool]) -> None:
    """Keep `cache` (name -> body) equal to the objects of the cluster-scoped `resource`
    that `keep` accepts, from a list+watch of its own (`podnetwork.kube.client.list_and_watch`:
    reconnects and 410 re-lists included) that peering never pauses.

    A replica paused by peering closes all of kopf's watches, so its controller
    never sees a namespace; admission, which every replica serves, still needs the
    profiles. After each (re-)listing the cache is replaced as a whole, so objects
    deleted while no watch was open leave it too; until then the old cache serves.
    """
    from podnetwork.kube import client as kube

    def name_of(body: Mapping[str, Any]) -> str | None:
        meta = _metadata(body)
        return None if meta is None else meta.name

    def on_list(items: list[dict[str, Any]]) -> None:
        listing = {name: body for body in items if (name := name_of(body)) and keep(body)}
        for name in set(cache) - set(listing):
            del cache[name]
        cache.update(listing)

    def on_event(kind: str, body: dict[str, Any]) -> None:
        name = name_of(body)
        if not name:
            return
        if kind != "DELETED" and keep(body):
            cache[name] = body
        else:
            cache.pop(name, None)

    await kube.list_and_watch(api, resource, on_list=on_list, on_event=on_event)


def register_mirror(registry: Any, cache: dict[str, dict[str, Any]], api: kube.AsyncApi, *,
                    resource: kube.Resource | None = None,
                    keep: Callable[[Mapping[str, Any]], bool] = has_profile) -> None:
    """Mirror the cluster-scoped objects (default: Namespaces) `keep` accepts (by default the
    profiled ones; the controller passes `any_object`) into `cache` while the operator of
    `registry` runs, paused or not: the watch starts from kopf's startup activity, which
    peering does not gate."""
    import kopf

    from podnetwork.kube import client as kube

    watched = resource or kube.Namespace
    task: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def start_namespace_mirror(**_: Any) -> None:
        task.append(asyncio.create_task(retrying(
            f"watching {kube.plural_of(watched)} for admission", lambda: mirror(api, watched, cache, keep))))

    @kopf.on.cleanup(registry=registry)
    async def stop_namespace_mirror(**_: Any) -> None:
        for t in task:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t


def outranked(status: Mapping[str, Any], identity: str, priority: int) -> bool:
    """kopf's pausing rule over a peering object's `status` (`podnetwork.kube.peering`)."""
    from podnetwork.kube import peering

    return peering.outranked(status, identity, priority)


def webhook_flags(args: argparse.Namespace) -> operatorshell.WebhookFlags:
    return operatorshell.WebhookFlags.from_args(args, serve=not args.no_webhook)


def metrics(ctl: Any) -> kube_metrics.OperatorMetrics:
    """The controller's metrics (docs/metrics.md): the shared operator ones, the writes of
    its API client, and the sizes of its in-use index and caches."""
    from podnetwork.cli import metrics as kube_metrics

    measured = kube_metrics.OperatorMetrics("controller")
    if ctl.api is not None:
        ctl.api.on_write = measured.on_write
    measured.gauge("inuse_index_entries", "Entries of the in-use index: consumer pods and "
                   "attachments, and the PodNetworks and attachments they use (KEP \"InUse\").",
                   lambda: {(part,): n for part, n in ctl.index.sizes().items()}, ["part"])
    measured.gauge("cached_objects", "PodNetworks and attachments, nodes and namespaces held in memory.",
                   lambda: {("podnetwork_or_attachment",): len(ctl.objects), ("node",): len(ctl.nodes),
                            ("namespace",): len(ctl.namespaces)}, ["kind"])
    return measured


async def serve(args: argparse.Namespace, *, stop: asyncio.Event | None = None) -> int:
    """Run what `args` asks for until `stop` is set (or SIGINT/SIGTERM). 2 when the webhooks
    cannot be served (port in use, unusable certificate), before anything started."""
    import kopf

    from podnetwork.cli import metrics as kube_metrics
    from podnetwork.commands import admissionapp
    from podnetwork.kep import admission, controller
    from podnetwork.kube import client as kube
    from podnetwork.kube import peering

    demoted = asyncio.Event()
    gates = parse_feature_gates(args.feature_gates)
    enabled = multinetwork_enabled(gates)
    flags = webhook_flags(args)
    # With the gate off nothing is read or written (but the webhooks' own Secret and
    # configurations, with --manage-webhooks): no credentials are needed.
    needs_cluster = enabled or (flags.serve and flags.manage)
    creds = credentials.resolve(args.kubeconfig, args.context) if needs_cluster else None
    api = kube.AsyncApi(creds) if creds is not None else None
    config = controller.ControllerSettings(
        create_default=not args.disable_default_podnetwork_creation,
        default_provider=args.default_provider,
        enabled=enabled,
        inuse_message_interval=args.inuse_message_interval,
        resync_interval=args.resync_interval,
    )
    ctl = controller.Controller(config=config, api=api)
    measured = metrics(ctl)
    cluster = creds.describe if creds is not None else "none (MultiNetwork=false)"
    served = operatorshell.webhook_summary(flags, [admission.MUTATE_PATH, admission.VALIDATE_PATH])
    logs.log_start(COMMAND, cluster=cluster, webhook=served, features=features(args, gates))
    try:
        with operatorshell.Shell(COMMAND, stop) as shell:
            shell.metrics(kube_metrics.asgi_app(measured.registry), args.metrics_host, args.metrics_port)
            if flags.serve:
                endpoint = shell.webhook(flags)
                app = measured.webhook(admissionapp.app(
                    ctl.namespace, enabled=enabled, fetch_namespace=ctl.fetch_namespace,
                    may_use=ctl.may_use if args.enforce_use_permission else None,
                    attachment_network=ctl.attachment_network))
                server = shell.serve(app, endpoint.sockets, endpoint.serving,
                                     max_body_bytes=flags.max_body_bytes, ready_probe=True)
                if flags.manage and api is not None:
                    shell.keep_webhooks(endpoint, server, api, component=COMPONENT,
                                        configurations=admission.webhook_configurations)
            if enabled and api is not None and creds is not None:
                registry = kopf.OperatorRegistry()
                controller.register(registry, ctl, measured)
                if args.peering is not None and flags.serve and config.namespace_profiles:
                    # Every namespace, not only profiled ones: admission reads an unseen one once.
                    register_mirror(registry, ctl.namespaces, api, keep=any_object)
                identity = None
                if args.peering is not None:
                    identity = peering.identity()  # as kopf would make it, but known here

                    def demote() -> None:
                        logger.error("another replica of peering %r outranks this one, which was "
                                     "active: exiting, to restart as a standby with a clean memory",
                                     args.peering)
                        demoted.set()
                        shell.stop.set()

                    register_demotion_guard(registry, api, identity, demote)
                kopf.on.login(registry=registry)(credentials.kopf_login(creds))
                shell.check_server(creds)
                # kopf types `identity` as its NewType of str, which only its private modules export.
                shell.operator(registry=registry, clusterwide=True, identity=cast(Any, identity),
                               **peering_options(args))
            else:
                logger.warning("feature gate %s=false: the controller watches and writes nothing; "
                               "admission allows every pod unchanged", constants.FEATURE_GATE)
            await shell.run()
    except operatorshell.Refused as exc:
        return operatorshell.refuse(COMMAND, str(exc))
    finally:
        if api is not None:
            await api.close()
    return 1 if demoted.is_set() else 0


def _run(args: argparse.Namespace) -> int:
    try:
        gates = parse_feature_gates(args.feature_gates)
    except ValueError as exc:
        return operatorshell.refuse(COMMAND, str(exc))
    problem = operatorshell.webhook_problem(webhook_flags(args), turn_on="drop --no-webhook")
    if problem is not None:
        return operatorshell.refuse(COMMAND, problem)
    if args.priority is not None and args.peering is None:
        return operatorshell.refuse(COMMAND, "--priority only matters among peers: add --peering NAME "
                                    "(a ClusterKopfPeering object), or drop --priority")
    flags = webhook_flags(args)
    if multinetwork_enabled(gates) or (flags.serve and flags.manage):
        problem = credentials.login_problem(args.kubeconfig, args.context)
        if problem is not None:
            return operatorshell.refuse(COMMAND, f"cannot reach a cluster: {problem}; pass --kubeconfig "
                                        "FILE (and --context) or run in a pod with a service account")
    logs.operator_logging(args.verbose)
    return asyncio.run(serve(args))


def features(args: argparse.Namespace, gates: Mapping[str, bool]) -> dict[str, object]:
    """What this controller does, for its start-up line."""
    return {"feature-gates": [f"{k}={str(v).lower()}" for k, v in
                              {constants.FEATURE_GATE: multinetwork_enabled(gates), **gates}.items()],
            "default-podnetwork": not args.disable_default_podnetwork_creation,
            "enforce-use-permission": args.enforce_use_permission,
            "peering": args.peering or "standalone", "resync-interval": f"{args.resync_interval:g}s"}


command = cli.Command(
    help="run the PodNetwork controller (kopf) and pod admission webhooks",
    configure=_configure,
    run=_run,
    description=DESCRIPTION,
)
