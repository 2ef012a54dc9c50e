"""`podnetwork conformance` (the KEP-3698 suite, as a process) against this project's components on
kmock's emulator (tests/api/conformance_support.py): the whole extended profile passes, a missing
extender skips what needs it with that reason, and broken controllers fail the right tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import jsonschema
import kmock
import pytest

from conformance.kep import features, report
from conformance.kep.tests import ALL
from podnetwork.ground import constants
from tests.api import conformance_support as cs
from tests.api import kube_emulator

pytestmark = pytest.mark.timeout(600)

# Long enough that a loaded machine (the real tier's cluster runs beside these tests) does not
# time a check out, nor the emulator's answer (it shares its process and the cores with the
# components); these only bound waits, and the probes that skip wait them in full.
SCHEDULE_TIMEOUT = 20
FAST = ("--settle-timeout", "20", "--schedule-timeout", str(SCHEDULE_TIMEOUT), "--request-timeout", "30")
#: The extended profile's tests: all but an opt-in feature's (DRAPlacement), which no profile holds.
EXTENDED = [t for t in ALL if set(t.features) <= set(features.PROFILES["extended"])]
IMPLEMENTATION = ("--implementation-name", "podnetwork", "--implementation-version", "test",
                  "--implementation-url", "https://podnetwork.test/")


async def test_the_extended_profile_passes_against_our_components_and_the_report_validates(tmp_path: Path) -> None:
    out_file = tmp_path / "report.yaml"
    async with cs.cluster(tmp_path / "cluster") as the:
        code, out = await cs.conformance(the, "--profile", "extended", "--report", str(out_file), *IMPLEMENTATION,
                                         *FAST)
        api = kube_emulator.api(the.emulator)
        left_pods = (await api.list(cs.kube.Pod)).items
        left_networks = [p["metadata"]["name"] for p in (await api.list(cs.kube.PodNetwork)).items]
        left_slices = (await api.list(cs.kube.EndpointSlice)).items
        node_annotations = [(n["metadata"].get("annotations") or {}).get(constants.NODE_PODNETWORKS_ANNOTATION)
                            for n in (await api.list(cs.kube.Node)).items]
        await api.close()
        left_namespaces = list(the.emulator.namespaces)
    assert code == 0, out
    document = cs.load_report(out_file)
    jsonschema.Draft202012Validator(report.schema()).validate(document)
    found = cs.outcomes(document)
    assert set(found) == {t.name for t in EXTENDED}, "every test of the profile is in the extended profile's report"
    # There is no kubelet on the emulator: the one test that needs a running pod is skipped, saying so.
    assert found.pop("PodIPsPerNetwork") == ("skipped", f"no pod reached Running in {SCHEDULE_TIMEOUT}s: no kubelet runs pods on "
                                                        "the nodes")
    # Nor a policy implementation: the emulator does not serve MultiNetworkPolicy.
    assert found.pop("NetworkPolicyDenyThenAllow") == (
        "skipped", "MultiNetworkPolicy (k8s.cni.cncf.io/v1beta1) is not served: no policy implementation is installed")
    # Nor a PodNetwork named to run pods on alone (--primary-network).
    no_network = ("skipped", "no PodNetwork to run a pod on alone: pass --primary-network NAME, a Ready PodNetwork "
                             "the cluster attaches to pods")
    assert found.pop("PrimaryPodNetworkExplicitList") == no_network
    assert found.pop("PrimaryPodNetworkReadinessProbe") == no_network
    # Nor a PodNetwork to run a Service's backends on (--service-network); ServiceEndpointSlices,
    # whose pods never run, passes.
    assert found.pop("ServiceClusterIP") == ("skipped", "no PodNetwork to serve a Service on: pass --service-network "
                                                        "NAME, a Ready PodNetwork the cluster attaches to pods")
    assert {name: outcome for name, (outcome, _) in found.items()} == dict.fromkeys(found, "passed")
    assert [p["result"] for p in document["profiles"]] == ["success", "partial"]
    assert document["kubernetesVersion"] and document["implementation"]["name"] == "podnetwork"
    assert f"[{len(EXTENDED)}/{len(EXTENDED)}]" in out, "progress is shown per test"
    # Each test removed what it made.
    assert left_pods == [] and left_networks == [constants.DEFAULT_PODNETWORK] and left_namespaces == []
    assert left_slices == [], "the Services the tests made took their EndpointSlices with them"
    assert node_annotations == [None, None], "BoundWhereOffered put the nodes' annotation back"
    assert "cleanupProblems" not in document


async def test_without_an_extender_the_active_validation_tests_are_skipped_with_that_reason(tmp_path: Path) -> None:
    # Without the bridge too: its scheduling gate holds pods naming a missing network, which is
    # what the suite's probe creates (the extended profile's run shows the gate passing the tests).
    async with cs.cluster(tmp_path / "cluster", extender=False, bridge=False) as the:
        code, out = await cs.conformance(the, "--features", "ActiveValidation,PodNetworkConditions",
                                         "--report", str(tmp_path / "r.json"), *IMPLEMENTATION, *FAST)
    assert code == 0, out
    document = cs.load_report(tmp_path / "r.json")
    jsonschema.Draft202012Validator(report.schema()).validate(document)
    found = cs.outcomes(document)
    no_extender = ("skipped", "a pod naming a missing PodNetwork was bound to a node: nothing checks a pod's "
                              "networks in kube-scheduler (no extender or plugin is wired)")
    assert found == {
        "PodNetworkReady": ("passed", ""), "PodNetworkDisabled": ("passed", ""),
        "PodNetworkParamsNotReady": ("passed", ""),
        "PendingUntilNetworkExists": no_extender, "PendingWhileNotReady": no_extender,
        "AttachmentAndItsPodNetwork": no_extender,
    }


async def test_pods_reach_a_second_scheduler_with_scheduler_name_and_none_binds_them_without(
        tmp_path: Path) -> None:
    async with cs.cluster(tmp_path / "cluster", bridge=False, scheduler_name="podnetwork-scheduler") as the:
        code, out = await cs.conformance(the, "--features", "ActiveValidation", *FAST)
        assert code == 0, out
        assert out.count("SKIPPED") == 3, out
        assert out.count(f"no pod was bound to a node in {SCHEDULE_TIMEOUT}s: no kube-scheduler runs") == 3, out
        code, out = await cs.conformance(the, "--features", "ActiveValidation", "--scheduler-name",
                                         "podnetwork-scheduler", *FAST)
        assert code == 0, out
        assert out.count("PASSED") == 3, out


@contextlib.asynccontextmanager
async def _broken_controller(the: cs.Cluster) -> AsyncIterator[None]:
    task = asyncio.create_task(cs.ready_without_finalizers(kube_emulator.api(the.emulator)))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_controller_that_sets_no_finalizer_and_ignores_enabled_fails_exactly_those_tests(
        tmp_path: Path) -> None:
    async with cs.cluster(tmp_path / "cluster", controller=False, extender=False, bridge=False,
                          scheduler=False) as the, _broken_controller(the):
        code, out = await cs.conformance(the, "--features", "PodNetworkConditions,InUseProtection",
                                         "--report", str(tmp_path / "r.yaml"), *IMPLEMENTATION,
                                         "--settle-timeout", "3")
    assert code == 1, out
    document = cs.load_report(tmp_path / "r.yaml")
    jsonschema.Draft202012Validator(report.schema()).validate(document)
    found = cs.outcomes(document)
    assert {name: outcome for name, (outcome, _) in found.items()} == {
        "PodNetworkReady": "passed",
        "PodNetworkDisabled": "failed", "PodNetworkParamsNotReady": "failed",
        "PodNetworkInUse": "failed", "PodNetworkInUseByAttachment": "failed",
    }
    assert "gets Ready=False reason AdministrativelyDisabled: not met in 3s" in found["PodNetworkDisabled"][1]
    assert "in use by pod user, gets a finalizer: not met in 3s" in found["PodNetworkInUse"][1]
    (core,) = document["profiles"]
    assert core["result"] == "failure" and core["failedFeatures"] == ["InUseProtection", "PodNetworkConditions"]


async def test_crds_installed_without_their_validation_fail_the_api_tests(tmp_path: Path) -> None:
    async with cs.cluster(tmp_path / "cluster", crd_validation=False, extender=False, bridge=False,
                          scheduler=False) as the:
        code, out = await cs.conformance(the, "--features", "PodNetworkAPI", *FAST)
    assert code == 1, out
    assert "PodNetworkRoundTrip ... FAILED" in out and "spec.enabled should default to true" in out
    assert ('SpecImmutable ... FAILED (' in out
            and 'changing PodNetwork spec.provider (KEP "Mutability": immutable except enabled): was accepted' in out)


async def test_a_podnetwork_never_made_ready_fails_the_ready_test(tmp_path: Path) -> None:
    async with cs.cluster(tmp_path / "cluster", controller=False, extender=False, bridge=False,
                          scheduler=False) as the:
        code, out = await cs.conformance(the, "--features", "PodNetworkConditions", "--skip-tests",
                                         "PodNetworkDisabled,PodNetworkParamsNotReady", "--settle-timeout", "2")
    assert code == 1, out
    assert "PodNetworkReady ... FAILED" in out and "gets Ready=True: not met in 2s (last seen: no Ready condition" in out
    assert "core: failure (0 passed, 1 failed, 2 skipped)" in out


async def test_network_policy_is_skipped_saying_which_part_is_missing_the_network_or_a_kubelet(
    tmp_path: Path
) -> None:
    """With MultiNetworkPolicy served (its CRD declared), the test goes on to what else it needs:
    a PodNetwork to run on (--policy-network), then a kubelet, and says which is missing."""
    async with cs.cluster(tmp_path / "cluster", extender=False) as the:
        the.emulator.resources[f"{constants.POLICY_GROUP}/{constants.POLICY_VERSION}/{constants.POLICY_PLURAL}"] = (
            kmock.ResourceInfo(kind=constants.POLICY_KIND, namespaced=True,
                                  verbs=set(kube_emulator.ALL_VERBS)))
        runs = []
        for extra in ((), ("--policy-network", "blue")):
            report_file = tmp_path / f"r{len(runs)}.json"
            code, out = await cs.conformance(the, "--features", "NetworkPolicy", "--report", str(report_file),
                                             *IMPLEMENTATION, *FAST, *extra)
            assert code == 0, out
            runs.append(cs.outcomes(cs.load_report(report_file))["NetworkPolicyDenyThenAllow"])
    assert runs == [
        ("skipped", "no PodNetwork to test policies on: pass --policy-network NAME, a Ready PodNetwork the "
                    "cluster attaches to pods"),
        ("skipped", f"no pod reached Running in {SCHEDULE_TIMEOUT}s: no kubelet runs pods on the nodes"),
    ]


async def test_primary_podnetwork_is_skipped_saying_which_part_is_missing_the_network_or_a_kubelet(
    tmp_path: Path
) -> None:
    """Without --primary-network the tests say so; with one, they go on to need a kubelet, and say so."""
    async with cs.cluster(tmp_path / "cluster", extender=False) as the:
        runs = []
        for extra in ((), ("--primary-network", "blue")):
            report_file = tmp_path / f"r{len(runs)}.json"
            code, out = await cs.conformance(the, "--features", "PrimaryPodNetwork", "--report", str(report_file),
                                             *IMPLEMENTATION, *FAST, *extra)
            assert code == 0, out
            found = cs.outcomes(cs.load_report(report_file))
            runs.append((found["PrimaryPodNetworkExplicitList"], found["PrimaryPodNetworkReadinessProbe"]))
    no_network = ("skipped", "no PodNetwork to run a pod on alone: pass --primary-network NAME, a Ready PodNetwork "
                             "the cluster attaches to pods")
    no_kubelet = ("skipped", f"no pod reached Running in {SCHEDULE_TIMEOUT}s: no kubelet runs pods on the nodes")
    assert runs == [(no_network, no_network), (no_kubelet, no_kubelet)]


async def test_service_cluster_ip_is_skipped_saying_which_part_is_missing_the_network_or_a_kubelet(
    tmp_path: Path
) -> None:
    """ServiceClusterIP says it needs --service-network, then a kubelet (ServiceEndpointSlices, which
    needs neither, passes in the extended profile's run)."""
    async with cs.cluster(tmp_path / "cluster", extender=False) as the:
        runs = []
        for extra in ((), ("--service-network", "blue")):
            report_file = tmp_path / f"r{len(runs)}.json"
            code, out = await cs.conformance(the, "--features", "Services", "--skip-tests", "ServiceEndpointSlices",
                                             "--report", str(report_file), *IMPLEMENTATION, *FAST, *extra)
            assert code == 0, out
            runs.append(cs.outcomes(cs.load_report(report_file))["ServiceClusterIP"])
    assert runs == [
        ("skipped", "no PodNetwork to serve a Service on: pass --service-network NAME, a Ready PodNetwork the "
                    "cluster attaches to pods"),
        ("skipped", f"no pod reached Running in {SCHEDULE_TIMEOUT}s: no kubelet runs pods on the nodes"),
    ]


async def test_service_endpoint_slices_fails_when_no_controller_writes_slices(tmp_path: Path) -> None:
    """Without the bridge (the Services implementation) the slices never come: the test fails, naming
    the pods whose addresses are missing."""
    async with cs.cluster(tmp_path / "cluster", extender=False, bridge=False) as the:
        code, out = await cs.conformance(the, "--features", "Services", "--report", str(tmp_path / "r.json"),
                                         *IMPLEMENTATION, "--settle-timeout", "3", "--schedule-timeout", "3")
    assert code == 1, out
    outcome, message = cs.outcomes(cs.load_report(tmp_path / "r.json"))["ServiceEndpointSlices"]
    assert outcome == "failed", message
    assert "no endpoint for pod backend-a (IPv4 198.51.100.11), backend-b (IPv4 198.51.100.12)" in message, message
