"""The operators make, share, serve and rotate their webhook certificate, and register their webhook
configurations only once they answer: `podnetwork controller` and `podnetwork bridge` as processes,
started with the arguments of deploy/'s Deployments, against kmock's emulator.

The emulator answers as kube-apiserver does where it matters here: a create of an existing object
gets 409 AlreadyExists, a patch with a stale resourceVersion 409 Conflict, and writes can be held
until two replicas are both writing (`Emulator.hold`), so their race really happens. The test plays
the EndpointSlice controller: it marks the Service's endpoint ready once a replica's /readyz says so,
as the kubelet's probe and the control plane would. Every check of a served certificate is a real TLS
handshake on loopback, trusting only the registered caBundle and dialling the name the API server
dials (SERVICE.NAMESPACE.svc).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from bridge.operator import admission as bridge_admission
from podnetwork.kep import admission
from podnetwork.kube import certificates, webhooksecret
from tests.api.kube_emulator import Emulator, declare_resources, eventually, requests_to, write_kubeconfig
from tests.api.shell.test_sigterm import crashed, free_port

pytestmark = [pytest.mark.kmock(cls=Emulator), pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[3]
PODNETWORK = [sys.executable, "-m", "podnetwork"]
NS = "multinetwork-system"
SECRETS = "v1/secrets"
SLICES = "discovery.k8s.io/v1/endpointslices"
MWC = "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VWC = "admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
ROLES = "rbac.authorization.k8s.io/v1/clusterroles"
PEERINGS = "kopf.dev/v1/clusterkopfpeerings"


def deploy_command(component: str) -> list[str]:
    """The container command of deploy/COMPONENT/deployment.yaml, without `podnetwork`."""
    docs = yaml.safe_load_all((ROOT / "deploy" / component / "deployment.yaml").read_text())
    (deployment,) = [d for d in docs if d and d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command = list(container["command"])
    assert command[0] == "podnetwork"
    return command[1:]


def flag(argv: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in argv if a.startswith(f"{name}=")]
    return value


def declare(k: Any, owner: str | None) -> None:
    """The resources the operators touch, deploy/peering's objects, and the owner ClusterRole
    as `kubectl apply -k deploy/...` made it (with the uid the API server gave it)."""
    declare_resources(k)
    verbs = {"get", "list", "watch", "create", "patch"}
    k.resources[SECRETS] = kmock.ResourceInfo(kind="Secret", namespaced=True, verbs=verbs)
    k.resources[SLICES] = kmock.ResourceInfo(kind="EndpointSlice", namespaced=True, verbs=verbs)
    k.resources[MWC] = kmock.ResourceInfo(kind="MutatingWebhookConfiguration", namespaced=False, verbs=verbs)
    k.resources[VWC] = kmock.ResourceInfo(kind="ValidatingWebhookConfiguration", namespaced=False, verbs=verbs)
    k.resources[ROLES] = kmock.ResourceInfo(kind="ClusterRole", namespaced=False, verbs=verbs)
    k.resources[PEERINGS] = kmock.ResourceInfo(kind="ClusterKopfPeering", namespaced=False,
                                               verbs={"list", "watch", "get", "patch"})
    for name in ("podnetwork-controller", "podnetwork-bridge"):
        k.objects[PEERINGS, None, name] = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
                                           "metadata": {"name": name, "resourceVersion": "0"}}
    if owner is not None:
        k.objects[ROLES, None, owner] = role(owner)


def role(name: str) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"}, "rules": []}


class Replica:
    """One `podnetwork COMMAND` process with the deploy/ arguments, on its own loopback port."""

    def __init__(self, k: Any, tmp_path: Path, component: str, name: str, *extra: str) -> None:
        self.k = k
        self.port = free_port()
        self.lines: list[str] = []
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(k.url).rstrip("/"))
        # The Deployment's arguments; then what differs on a test machine (argparse keeps the last).
        self.argv = [*deploy_command(component), "--kubeconfig", str(kubeconfig),
                     "--webhook-host", "127.0.0.1", "--webhook-port", str(self.port),
                     "--metrics-host", "127.0.0.1", "--metrics-port", str(free_port()),
                     "--webhook-check-interval", "0.3", *extra]
        self.env = {**os.environ, "KUBECONFIG": "", "POD_ID": name}
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *PODNETWORK, *self.argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=self.env)

        async def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            async for line in self.proc.stdout:
                self.lines.append(line.decode().rstrip())
        self._reader = asyncio.create_task(read())

    async def stop(self) -> int:
        assert self.proc is not None and self._reader is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 60)
        await asyncio.wait_for(self._reader, 60)
        return code

    async def ready(self) -> None:
        """Wait until GET /readyz answers 200, as the kubelet's readiness probe would see it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        async with httpx.AsyncClient(verify=False, timeout=5) as client:
            while True:
                assert self.proc is not None and self.proc.returncode is None, "\n".join(self.lines)
                assert loop.time() < deadline, "/readyz never answered 200:\n" + "\n".join(self.lines)
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"https://127.0.0.1:{self.port}/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.1)

    def peered(self) -> bool:
        """Whether this replica's keep-alive is in its peering object (kopf writes it at start)."""
        peering = flag(self.argv, "--peering") if any(a.startswith("--peering=") for a in self.argv) else None
        if peering is None:
            return True
        status = dict(self.k.objects[PEERINGS, None, peering].raw).get("status") or {}
        return self.env["POD_ID"] in status

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)


@contextlib.asynccontextmanager
async def replicas(*started: Replica) -> AsyncIterator[None]:
    """The replicas, started one after the other as a Deployment's are: each once the ones before
    have their keep-alive in the peering object, so the first started stays the active one (a
    replica outranked after being active exits, by design, to restart as a standby)."""
    try:
        for replica in started:
            await replica.start()
            if len(started) > 1:
                await eventually(lambda r=replica: r.peered(), timeout=30)
        yield
    finally:
        codes = await asyncio.gather(*(r.stop() for r in started if r.proc is not None))
        for replica, code in zip(started, codes, strict=True):
            out = "\n".join(replica.lines)
            assert code == 0 and not crashed(out), out


async def served_certificate(port: int, ca_bundle_b64: str, hostname: str) -> bytes:
    """The DER certificate the server on `port` presents to a client that trusts only `ca_bundle_b64`
    (base64 PEM, as registered) and dials `hostname`; raises when the client refuses it."""
    context = ssl.create_default_context(cadata=base64.b64decode(ca_bundle_b64).decode())
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # Go: every certificate of the pool is an anchor
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=hostname)
    try:
        writer.write(f"GET /healthz HTTP/1.1\r\nHost: {hostname}\r\nConnection: close\r\n\r\n".encode())
        assert (await reader.readline()).split()[1] == b"200"
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    assert der is not None
    return bytes(der)


def stored(k: Any, key: tuple[str, str | None, str]) -> dict[str, Any]:
    return dict(k.objects[key].raw)


def secret_data(k: Any, name: str) -> dict[str, str]:
    return dict(stored(k, (SECRETS, NS, name))["data"])


def pem(data: dict[str, str], key: str) -> bytes:
    return base64.b64decode(data[key])


def ready_slice(service: str) -> dict[str, Any]:
    """The EndpointSlice the control plane writes once a backend of `service` is ready."""
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": f"{service}-abcde", "namespace": NS,
                         "labels": {"kubernetes.io/service-name": service}},
            "endpoints": [{"addresses": ["10.0.0.5"], "conditions": {"ready": True}}],
            "ports": [{"name": "webhook", "port": 9443, "protocol": "TCP"}]}


async def write(k: Any, method: str, path: str, body: Any) -> None:
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
    async with k.request(method, path, json=body, headers=headers) as resp:
        assert resp.status < 300, await resp.text()


def request_index(k: Any, method: str, suffix: str) -> list[int]:
    return [i for i, req in enumerate(list(k))
            if req.method.value == method and str(req.url.path).endswith(suffix)]


async def test_two_controller_replicas_share_one_new_secret_and_register_the_webhooks_only_once_they_answer(
    kmock: Emulator, tmp_path: Path
) -> None:
    declare(kmock, "podnetwork-controller")
    argv = deploy_command("controller")
    namespace, service = flag(argv, "--webhook-service").split("/")
    secret = flag(argv, "--webhook-secret")
    hostname = f"{service}.{namespace}.svc"
    # Both replicas find no Secret and both create one: the second create gets 409 AlreadyExists.
    creates = kmock.hold(f"/namespaces/{NS}/secrets")
    first, second = (Replica(kmock, tmp_path, "controller", f"replica-{i}") for i in (1, 2))
    async with replicas(first, second):
        await first.ready()
        await second.ready()
        assert creates.arrived == 2
        assert len(requests_to(kmock, "POST", f"/namespaces/{NS}/secrets")) == 2
        await eventually(lambda: first.said("written by another replica") or second.said("written by another replica"))
        data = secret_data(kmock, secret)
        assert set(data) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
        bundle = data["ca.crt"]
        # One certificate, served by both, which the CA of the Secret verifies for the Service's name.
        assert await served_certificate(first.port, bundle, hostname) == await served_certificate(
            second.port, bundle, hostname)
        # Served and ready, but the Service has no ready endpoint yet: nothing registered.
        await asyncio.sleep(1.0)
        assert requests_to(kmock, "POST", "/mutatingwebhookconfigurations") == []
        assert requests_to(kmock, "POST", "/validatingwebhookconfigurations") == []
        assert first.said(f"waiting for a ready endpoint of Service {namespace}/{service}")

        await write(kmock, "POST", f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices", ready_slice(service))
        mutating = await eventually(lambda: stored(kmock, (MWC, None, admission.CONFIGURATION_NAME)))
        validating = await eventually(lambda: stored(kmock, (VWC, None, admission.CONFIGURATION_NAME)))
        # Registered after the endpoint turned ready, never before.
        (slice_created,) = request_index(kmock, "POST", "/endpointslices")
        assert min(request_index(kmock, "POST", "/mutatingwebhookconfigurations")) > slice_created
        for configuration in (mutating, validating):
            for hook in configuration["webhooks"]:
                client_config = hook["clientConfig"]
                assert client_config["service"] == {"namespace": namespace, "name": service, "port": 443,
                                                    "path": client_config["service"]["path"]}
                assert hook["failurePolicy"] == "Fail"
                # The registered caBundle verifies what each replica serves, for the name dialled.
                for replica in (first, second):
                    await served_certificate(replica.port, client_config["caBundle"], hostname)
            meta = configuration["metadata"]
            assert meta["ownerReferences"] == [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                                "name": "podnetwork-controller", "uid": "uid-podnetwork-controller"}]
            assert meta["labels"] == {"app.kubernetes.io/part-of": "podnetwork",
                                      "app.kubernetes.io/managed-by": "podnetwork-controller"}
        # The replicas agree: no further writes once registered.
        await asyncio.sleep(1.0)
        writes = len(requests_to(kmock, "PATCH", "/mutatingwebhookconfigurations/podnetwork"))
        await asyncio.sleep(1.0)
        assert len(requests_to(kmock, "PATCH", "/mutatingwebhookconfigurations/podnetwork")) == writes
        assert len(requests_to(kmock, "POST", f"/namespaces/{NS}/secrets")) == 2


async def test_replicas_renewing_one_certificate_at_once_agree_on_one_renewal(
    kmock: Emulator, tmp_path: Path
) -> None:
    declare(kmock, "podnetwork-controller")
    argv = deploy_command("controller")
    namespace, service = flag(argv, "--webhook-service").split("/")
    secret = flag(argv, "--webhook-secret")
    hostname = f"{service}.{namespace}.svc"
    # A Secret made 300 days ago: its serving certificate (a year) is past two thirds of its life.
    old = webhooksecret.decide(None, [hostname], ago(days=300))
    assert old.write is not None
    kmock.objects[SECRETS, NS, secret] = existing(secret, old.write)
    kmock.objects[SLICES, NS, f"{service}-abcde"] = ready_slice(service)
    renewals = kmock.hold(f"/namespaces/{NS}/secrets/{secret}")
    first, second = (Replica(kmock, tmp_path, "controller", f"replica-{i}") for i in (1, 2))
    async with replicas(first, second):
        await first.ready()
        await second.ready()
        # Both patched with resourceVersion 7; the second got 409 Conflict, read again, and took the first's.
        patches = requests_to(kmock, "PATCH", f"/namespaces/{NS}/secrets/{secret}")
        assert renewals.arrived == 2
        assert [p["metadata"]["resourceVersion"] for p in patches] == ["7", "7"]
        data = secret_data(kmock, secret)
        assert data["ca.crt"] == old.write["ca.crt"], "a serving certificate's renewal keeps the CA"
        assert data["tls.crt"] != old.write["tls.crt"]
        renewed = x509.load_pem_x509_certificate(pem(data, "tls.crt")).public_bytes(Encoding.DER)
        configuration = await eventually(lambda: stored(kmock, (MWC, None, admission.CONFIGURATION_NAME)))
        registered = configuration["webhooks"][0]["clientConfig"]["caBundle"]
        assert registered == data["ca.crt"]
        for replica in (first, second):
            await until(lambda r=replica: serves(r.port, registered, hostname, renewed))
        assert len(requests_to(kmock, "PATCH", f"/namespaces/{NS}/secrets/{secret}")) == 2


async def test_the_bridge_rotates_its_ca_and_certificate_and_serves_and_registers_what_its_secret_holds(
    kmock: Emulator, tmp_path: Path
) -> None:
    declare(kmock, "podnetwork-bridge")
    argv = deploy_command("bridge")
    namespace, service = flag(argv, "--webhook-service").split("/")
    secret = flag(argv, "--webhook-secret")
    hostname = f"{service}.{namespace}.svc"
    # A Secret made seven years ago: its CA (ten years) is past two thirds of its life.
    old = webhooksecret.decide(None, [hostname], ago(days=7 * 365))
    assert old.write is not None
    kmock.objects[SECRETS, NS, secret] = existing(secret, old.write)
    kmock.objects[SLICES, NS, f"{service}-abcde"] = ready_slice(service)
    bridge = Replica(kmock, tmp_path, "bridge", "bridge-1")
    key = (MWC, None, bridge_admission.CONFIGURATION_NAME)

    def bundle() -> str:
        return str(stored(kmock, key)["webhooks"][0]["clientConfig"]["caBundle"])

    async with replicas(bridge):
        await bridge.ready()
        await eventually(lambda: stored(kmock, key))
        # The CA rotated in the Secret (a patch with the resourceVersion read): the new CA first, the
        # old one kept while it is valid, so that a replica still serving a certificate of the old
        # one is trusted too; the registered caBundle is that pair.
        rotated = secret_data(kmock, secret)
        cas = x509.load_pem_x509_certificates(pem(rotated, "ca.crt"))
        old_ca = x509.load_pem_x509_certificates(pem(old.write, "ca.crt"))[0]
        assert len(cas) == 2 and cas[1] == old_ca and cas[0] != old_ca
        assert bundle() == rotated["ca.crt"]
        assert requests_to(kmock, "PATCH", f"/namespaces/{NS}/secrets/{secret}")[0]["metadata"]["resourceVersion"] == "7"
        assert bridge.said("renewed Secret") and bridge.said("its CA is due for renewal")
        await until(lambda: serves(bridge.port, bundle(), hostname, der(rotated)))

        # Another replica renewed the serving certificate: this one serves it once it reads it.
        other = with_leaf(rotated, hostname, ago(days=1))
        await write(kmock, "PATCH", f"/api/v1/namespaces/{NS}/secrets/{secret}", {"data": other})
        await until(lambda: serves(bridge.port, bundle(), hostname, der(other)))

        # A serving certificate due for renewal (made 300 days ago): renewed, served, same CA.
        due = with_leaf(rotated, hostname, ago(days=300))
        await write(kmock, "PATCH", f"/api/v1/namespaces/{NS}/secrets/{secret}", {"data": due})
        await eventually(lambda: secret_data(kmock, secret)["tls.crt"] not in (due["tls.crt"], other["tls.crt"]))
        renewed = secret_data(kmock, secret)
        assert renewed["ca.crt"] == rotated["ca.crt"] == bundle()
        await until(lambda: serves(bridge.port, bundle(), hostname, der(renewed)))


def ago(**delta: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(**delta)


def existing(name: str, data: dict[str, str]) -> dict[str, Any]:
    """The Secret as a replica created it earlier (resourceVersion 7)."""
    body = webhooksecret.body(name, NS, data, "podnetwork")
    body["metadata"]["resourceVersion"] = "7"
    return body


def der(data: dict[str, str]) -> bytes:
    return bytes(x509.load_pem_x509_certificate(pem(data, "tls.crt")).public_bytes(Encoding.DER))


def with_leaf(data: dict[str, str], hostname: str, when: datetime.datetime) -> dict[str, str]:
    """`data` with a serving certificate of its current CA, made at `when`."""
    ca_cert = x509.load_pem_x509_certificates(pem(data, "ca.crt"))[0].public_bytes(Encoding.PEM)
    leaf = certificates.new_serving(certificates.Issued(ca_cert, pem(data, "ca.key")), [hostname], when,
                                    datetime.timedelta(days=365))
    return {**data, "tls.crt": base64.b64encode(leaf.cert).decode(), "tls.key": base64.b64encode(leaf.key).decode()}


async def serves(port: int, bundle: str, hostname: str, expected: bytes) -> bool:
    return await served_certificate(port, bundle, hostname) == expected


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, f"not so within {timeout}s"
        await asyncio.sleep(0.1)


async def test_with_cert_manager_the_bridge_waits_for_the_secret_serves_it_and_never_writes_it(
    kmock: Emulator, tmp_path: Path
) -> None:
    declare(kmock, "podnetwork-bridge")
    argv = deploy_command("bridge")
    namespace, service = flag(argv, "--webhook-service").split("/")
    secret = flag(argv, "--webhook-secret")
    hostname = f"{service}.{namespace}.svc"
    kmock.objects[SLICES, NS, f"{service}-abcde"] = ready_slice(service)
    # The arguments deploy/cert-manager/bridge gives (deploy/components/cert-manager/bridge).
    bridge = Replica(kmock, tmp_path, "bridge", "bridge-1", "--webhook-secret-external")
    async with replicas(bridge):
        await eventually(lambda: bridge.said(f"Secret {NS}/{secret}: it does not exist (yet)"), timeout=30)
        # cert-manager has not issued it yet: nothing listens, nothing is registered, nothing written.
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", bridge.port)
        assert requests_to(kmock, "POST", "/mutatingwebhookconfigurations") == []
        assert requests_to(kmock, "POST", f"/namespaces/{NS}/secrets") == []

        # cert-manager issues it: tls.crt, tls.key and the CA's ca.crt (no ca.key).
        issued = webhooksecret.decide(None, [hostname], ago(minutes=1)).write
        assert issued is not None
        issued.pop("ca.key")
        await write(kmock, "POST", f"/api/v1/namespaces/{NS}/secrets", webhooksecret.body(secret, NS, issued, "cert-manager"))
        await bridge.ready()
        configuration = await eventually(lambda: stored(kmock, (MWC, None, bridge_admission.CONFIGURATION_NAME)))
        assert configuration["webhooks"][0]["clientConfig"]["caBundle"] == issued["ca.crt"]
        await until(lambda: serves(bridge.port, issued["ca.crt"], hostname, der(issued)))
    assert len(requests_to(kmock, "POST", f"/namespaces/{NS}/secrets")) == 1  # the test's own
    assert requests_to(kmock, "PATCH", f"/namespaces/{NS}/secrets/{secret}") == []


async def test_without_the_owner_clusterrole_the_bridge_registers_nothing_until_it_exists(
    kmock: Emulator, tmp_path: Path
) -> None:
    # `kubectl delete -k deploy/bridge` deletes the ClusterRole, and the garbage collector the
    # configuration it owns; a bridge still running then must not register it again.
    declare(kmock, None)
    argv = deploy_command("bridge")
    _, service = flag(argv, "--webhook-service").split("/")
    owner = flag(argv, "--webhook-owner")
    kmock.objects[SLICES, NS, f"{service}-abcde"] = ready_slice(service)
    bridge = Replica(kmock, tmp_path, "bridge", "bridge-1")
    async with replicas(bridge):
        await bridge.ready()
        await eventually(lambda: bridge.said(f"their owner, ClusterRole {owner} (--webhook-owner), does not exist"))
        await asyncio.sleep(1.0)
        assert requests_to(kmock, "POST", "/mutatingwebhookconfigurations") == []

        await write(kmock, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role(owner))
        configuration = await eventually(lambda: stored(kmock, (MWC, None, bridge_admission.CONFIGURATION_NAME)))
        assert configuration["metadata"]["ownerReferences"][0]["uid"] == f"uid-{owner}"


async def test_a_bridge_that_issues_its_own_certificate_leaves_one_that_cert_manager_issued_alone(
    kmock: Emulator, tmp_path: Path
) -> None:
    # Moving to deploy/cert-manager/bridge: until the rollout ends, a bridge of the old kind runs
    # beside cert-manager, which has taken the Secret over. It serves that, and never writes it.
    declare(kmock, "podnetwork-bridge")
    argv = deploy_command("bridge")
    namespace, service = flag(argv, "--webhook-service").split("/")
    secret = flag(argv, "--webhook-secret")
    hostname = f"{service}.{namespace}.svc"
    kmock.objects[SLICES, NS, f"{service}-abcde"] = ready_slice(service)
    issued = webhooksecret.decide(None, [hostname], ago(days=300)).write  # due for renewal, were it ours
    assert issued is not None
    issued.pop("ca.key")
    body = existing(secret, issued)
    body["metadata"]["annotations"] = {webhooksecret.CERT_MANAGER_ANNOTATION: service}
    kmock.objects[SECRETS, NS, secret] = body
    bridge = Replica(kmock, tmp_path, "bridge", "bridge-1")
    async with replicas(bridge):
        await bridge.ready()
        configuration = await eventually(lambda: stored(kmock, (MWC, None, bridge_admission.CONFIGURATION_NAME)))
        assert configuration["webhooks"][0]["clientConfig"]["caBundle"] == issued["ca.crt"]
        await until(lambda: serves(bridge.port, issued["ca.crt"], hostname, der(issued)))
        await asyncio.sleep(1.0)
    assert requests_to(kmock, "PATCH", f"/namespaces/{NS}/secrets/{secret}") == []
