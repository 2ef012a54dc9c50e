"""Core tests: the PodNetwork API, its conditions, the default PodNetwork, InUse protection and
PodNetworkAttachment (KEP-3698 "Phase I Design Details")."""

from __future__ import annotations

from conformance.kep import client as kc
from conformance.kep import views
from conformance.kep.suite import ConformanceTest, Context, TestFunction
from conformance.kep.tests import common as c
from podnetwork.ground import constants
from podnetwork.kube import client as kube


async def podnetwork_round_trip(ctx: Context) -> None:
    name = await c.podnetwork(ctx, "roundtrip")
    got = await ctx.client.get(kc.PodNetwork, name)
    assert got is not None, f"PodNetwork {name} was created but cannot be read back"
    spec, sent = views.read(got).spec, got.get("spec")
    assert spec.provider == "conformance.multinetwork.x-k8s.io/none", (
        f"spec.provider did not round-trip: {kc.shown(sent)}")
    # KEP "PodNetwork": `Enabled ... Defaults to True` (+kubebuilder:default=true).
    assert spec.enabled is True, f"spec.enabled should default to true, spec is {kc.shown(sent)}"
    pna = await c.attachment(ctx, "roundtrip", name)
    got_pna = await ctx.client.get(kc.PodNetworkAttachment, pna, ctx.namespace)
    assert got_pna is not None, f"PodNetworkAttachment {ctx.namespace}/{pna} cannot be read back"
    assert views.read(got_pna).spec.pod_network_name == name, (
        f"spec.podNetworkName did not round-trip: {kc.shown(got_pna.get('spec'))}")


async def podnetwork_immutable(ctx: Context) -> None:
    name = await c.podnetwork(ctx, "immutable")
    await c.refused(ctx, "changing PodNetwork spec.provider (KEP \"Mutability\": immutable except enabled)",
                    lambda: ctx.client.patch(kc.PodNetwork, name,
                                             {"spec": {"provider": "example.com/other"}}))
    refs = [{"group": "", "kind": "configmaps", "name": "x"}]
    await c.refused(ctx, "adding PodNetwork spec.parametersRefs", lambda: ctx.client.patch(
        kc.PodNetwork, name, {"spec": {"parametersRefs": refs}}))
    patched = await ctx.client.patch(kc.PodNetwork, name, {"spec": {"enabled": False}})
    assert views.read(patched).spec.enabled is False, (
        "spec.enabled is mutable (KEP \"Mutability\") but the patch did not take: "
        f"{kc.shown(patched.get('spec'))}")
    other = await c.podnetwork(ctx, "immutable-other")
    pna = await c.attachment(ctx, "immutable", name)
    await c.refused(ctx, "changing PodNetworkAttachment spec.podNetworkName (KEP \"Mutability\": immutable)",
                    lambda: ctx.client.patch(kc.PodNetworkAttachment, pna,
                                             {"spec": {"podNetworkName": other}}, namespace=ctx.namespace))


async def podnetwork_ready(ctx: Context) -> None:
    name = await c.podnetwork(ctx, "ready")
    await c.wait_condition(ctx, kc.PodNetwork, name, c.READY, "True")


async def podnetwork_disabled(ctx: Context) -> None:
    name = await c.podnetwork(ctx, "disabled")
    await c.wait_condition(ctx, kc.PodNetwork, name, c.READY, "True")
    await ctx.client.patch(kc.PodNetwork, name, {"spec": {"enabled": False}})
    await c.wait_condition(ctx, kc.PodNetwork, name, c.READY, "False",
                           constants.ReadyReason.ADMINISTRATIVELY_DISABLED.value)
    await ctx.client.patch(kc.PodNetwork, name, {"spec": {"enabled": True}})
    await c.wait_condition(ctx, kc.PodNetwork, name, c.READY, "True")


async def podnetwork_params_not_ready(ctx: Context) -> None:
    name = await c.podnetwork(ctx, "params", "podnetwork-with-params.yaml")
    await c.wait_condition(ctx, kc.PodNetwork, name, c.READY, "False",
                           constants.ReadyReason.PARAMS_NOT_READY.value)


async def default_podnetwork_exists(ctx: Context) -> None:
    default = constants.DEFAULT_PODNETWORK
    found = await ctx.client.eventually(f"PodNetwork {default!r} exists",
                                        lambda: ctx.client.get(kc.PodNetwork, default))
    assert found is not None
    await c.wait_condition(ctx, kc.PodNetwork, default, c.READY, "True")


async def default_podnetwork_protected(ctx: Context) -> None:
    # A dry run: the API server runs admission but removes nothing, so a cluster that would
    # let it go keeps its default network.
    await c.refused(ctx, "deleting the PodNetwork \"default\" (dry run; KEP Req 9: cannot be removed)",
                    lambda: ctx.client.api.delete(kc.PodNetwork, constants.DEFAULT_PODNETWORK, dry_run=True))
    found = await ctx.client.get(kc.PodNetwork, constants.DEFAULT_PODNETWORK)
    assert found is not None and not c.deleting(found), (
        f"PodNetwork \"default\" is being deleted: {kc.shown(found)}")


async def _stays_while_in_use(ctx: Context, resource: kc.Resource, name: str, namespace: str | None,
                              user: str) -> None:
    """`name` has a finalizer; a delete leaves it (deletionTimestamp) until the pod `user` goes."""
    kind = kube.kind_of(resource)

    async def has_finalizer() -> list[str] | None:
        obj = await ctx.client.get(resource, name, namespace)
        if obj is None:
            raise kc.Unmet(f"{kind} {name} does not exist")
        return c.finalizers(obj) or None

    await ctx.client.eventually(f"{kind} {name}, in use by pod {user}, gets a finalizer", has_finalizer)
    await ctx.client.delete(resource, name, namespace)

    async def still_there() -> str | None:
        obj = await ctx.client.get(resource, name, namespace)
        return f"{kind} {name} was deleted while pod {user} names it" if obj is None else None

    await ctx.client.never(f"{kind} {name} in use", still_there, for_seconds=2.0)
    await ctx.client.delete(kc.Pod, user, ctx.namespace)

    async def gone() -> bool:
        return await ctx.client.get(resource, name, namespace) is None

    await ctx.client.eventually(f"{kind} {name} is deleted once pod {user} is gone", gone)


async def podnetwork_in_use(ctx: Context) -> None:
    name = await c.podnetwork(ctx, "inuse")
    await c.pod(ctx, "user", [{"podNetworkName": constants.DEFAULT_PODNETWORK}, {"podNetworkName": name}])
    await _stays_while_in_use(ctx, kc.PodNetwork, name, None, "user")


async def attachment_in_use(ctx: Context) -> None:
    network = await c.podnetwork(ctx, "inuse-pna")
    pna = await c.attachment(ctx, "fast", network)
    await c.pod(ctx, "user", [{"podNetworkName": constants.DEFAULT_PODNETWORK},
                              {"podNetworkAttachmentName": pna}])
    await _stays_while_in_use(ctx, kc.PodNetworkAttachment, pna, ctx.namespace, "user")


async def podnetwork_in_use_by_attachment(ctx: Context) -> None:
    network = await c.podnetwork(ctx, "inuse-by-pna")
    pna = await c.attachment(ctx, "fast", network)

    async def has_finalizer() -> list[str] | None:
        return c.finalizers(await ctx.client.get(kc.PodNetwork, network)) or None

    await ctx.client.eventually(f"PodNetwork {network}, named by attachment {pna}, gets a finalizer",
                                has_finalizer)
    await ctx.client.delete(kc.PodNetwork, network)
    obj = await ctx.client.get(kc.PodNetwork, network)
    assert obj is not None, f"PodNetwork {network} was deleted while attachment {pna} names it"
    await ctx.client.delete(kc.PodNetworkAttachment, pna, ctx.namespace)

    async def gone() -> bool:
        return await ctx.client.get(kc.PodNetwork, network) is None

    await ctx.client.eventually(f"PodNetwork {network} is deleted once attachment {pna} is gone", gone)


async def attachment_follows_podnetwork(ctx: Context) -> None:
    network = await c.podnetwork(ctx, "pna-ready")
    pna = await c.attachment(ctx, "fast", network)
    await c.wait_condition(ctx, kc.PodNetworkAttachment, pna, c.READY, "True", namespace=ctx.namespace)
    await ctx.client.patch(kc.PodNetwork, network, {"spec": {"enabled": False}})
    await c.wait_condition(ctx, kc.PodNetworkAttachment, pna, c.READY, "False",
                           constants.ReadyReason.PODNETWORK_NOT_READY.value, namespace=ctx.namespace)
    await ctx.client.patch(kc.PodNetwork, network, {"spec": {"enabled": True}})
    await c.wait_condition(ctx, kc.PodNetworkAttachment, pna, c.READY, "True", namespace=ctx.namespace)


def _test(name: str, description: str, features: tuple[str, ...], spec: str, run: TestFunction,
          manifests: tuple[str, ...] = ()) -> ConformanceTest:
    return ConformanceTest(name, description, features, spec, run, manifests)


TESTS: tuple[ConformanceTest, ...] = (
    _test("PodNetworkRoundTrip",
          "A PodNetwork and a PodNetworkAttachment are stored as written; spec.enabled defaults to true.",
          ("PodNetworkAPI",), 'KEP "New Resources" (PodNetwork, PodNetworkAttachment), Req 2',
          podnetwork_round_trip, ("podnetwork.yaml", "attachment.yaml")),
    _test("SpecImmutable",
          "PodNetwork spec is immutable except enabled; PodNetworkAttachment spec is immutable.",
          ("PodNetworkAPI",), 'KEP "Mutability" (both objects), "Validations"',
          podnetwork_immutable, ("podnetwork.yaml", "attachment.yaml")),
    _test("PodNetworkReady",
          "A valid, enabled PodNetwork without parameters turns Ready.",
          ("PodNetworkConditions",), 'KEP "Status Conditions", "Lifecycle" (Ready)',
          podnetwork_ready, ("podnetwork.yaml",)),
    _test("PodNetworkDisabled",
          "enabled: false makes Ready False with reason AdministrativelyDisabled; enabling it again makes "
          "it Ready.",
          ("PodNetworkConditions",),
          'KEP "Status Conditions" (AdministrativelyDisabled), "Enabled", "Lifecycle" (Disabled)',
          podnetwork_disabled, ("podnetwork.yaml",)),
    _test("PodNetworkParamsNotReady",
          "A PodNetwork with parametersRefs and no ParamsReady condition is not Ready, reason "
          "ParamsNotReady.",
          ("PodNetworkConditions",),
          'KEP "Status Conditions" (ParamsNotReady: "ParamsReady ... not present")',
          podnetwork_params_not_ready, ("podnetwork-with-params.yaml",)),
    _test("DefaultPodNetworkExists",
          "The PodNetwork named default exists and is Ready.",
          ("DefaultPodNetwork",), 'KEP "Default PodNetwork", Req 8, Req 11',
          default_podnetwork_exists),
    _test("DefaultPodNetworkProtected",
          "Deleting the PodNetwork default is refused (asked as a dry run).",
          ("DefaultPodNetwork",), 'KEP Req 9, "Default PodNetwork" ("Availability")',
          default_podnetwork_protected),
    _test("PodNetworkInUse",
          "A PodNetwork a pod names carries a finalizer; deleting it leaves it in place until the pod is "
          "gone.",
          ("InUseProtection",), 'KEP "InUse state", "Lifecycle" (InUse)',
          podnetwork_in_use, ("podnetwork.yaml", "pod.yaml")),
    _test("PodNetworkInUseByAttachment",
          "A PodNetwork an attachment names is not deleted until the attachment is gone.",
          ("InUseProtection",), 'KEP "InUse state" ("referenced by ... PodNetworkAttachment")',
          podnetwork_in_use_by_attachment, ("podnetwork.yaml", "attachment.yaml")),
    _test("AttachmentInUse",
          "A PodNetworkAttachment a pod names carries a finalizer; deleting it leaves it in place until the "
          "pod is gone.",
          ("InUseProtection", "PodNetworkAttachment"), 'KEP "PodNetworkAttachment" ("InUse indicator")',
          attachment_in_use, ("podnetwork.yaml", "attachment.yaml", "pod.yaml")),
    _test("AttachmentFollowsPodNetwork",
          "An attachment is Ready while its PodNetwork is, and Ready False with reason PodNetworkNotReady "
          "while it is not.",
          ("PodNetworkAttachment",), 'KEP "PodNetworkAttachment" ("Status Conditions")',
          attachment_follows_podnetwork, ("podnetwork.yaml", "attachment.yaml")),
)
