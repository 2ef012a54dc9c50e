"""Which pod requests reach each webhook the project installs, as the real API server decides it.

The webhooks' `matchConditions` are CEL that only kube-apiserver evaluates: an absent field it
reads is an error, not false, and under failurePolicy Fail that error refuses the request (the
emulator of the api tier cannot show it). So each configuration the project registers
(`podnetwork.kep.admissionconfig.webhook_configurations`, the controller's;
`bridge.operator.admission.webhook_configurations(..., enforce_use=True)`, the bridge's) is
registered again here, the same rules and matchConditions built by the same functions, but
calling a recording webhook of the test on loopback and limited to the test's namespace. Every
kind of pod request is then made for real and the recorder says which webhooks were called.

The test's namespace is labelled out of the real operators' webhooks (if this session runs
them), so that only the copies see its pods.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bridge.operator import admission as bridge_admission
from bridge.operator import selectionuse
from podnetwork.ground import constants
from podnetwork.kep import admissionconfig
from podnetwork.kube.certificates import self_signed_pem
from tests.real.cluster_support import BUSYBOX, Api, ApiError, Node, eventually, pod_manifest, wait_phase

NETWORKS = constants.NETWORKS_ANNOTATION
SELECTION = selectionuse.SELECTION
ADMISSIONREGISTRATION = "/apis/admissionregistration.k8s.io/v1"
#: The recorder's paths: the origin of each configuration, then the path the product gives the hook.
CONTROLLER_MUTATE = "/controller" + admissionconfig.MUTATE_PATH
CONTROLLER_VALIDATE = "/controller" + admissionconfig.VALIDATE_PATH
BRIDGE_MUTATE = "/bridge" + bridge_admission.MUTATE_PATH
BRIDGE_VALIDATE = "/bridge" + bridge_admission.VALIDATE_PATH
ALL = {CONTROLLER_MUTATE, CONTROLLER_VALIDATE, BRIDGE_MUTATE, BRIDGE_VALIDATE}
VALIDATING = {CONTROLLER_VALIDATE, BRIDGE_VALIDATE}


@dataclass
class Call:
    path: str
    operation: str
    sub_resource: str | None
    username: str
    kind: str
    name: str
    dry_run: bool


@dataclass
class Recorder:
    """An HTTPS admission webhook that allows everything and remembers every call."""

    url: str
    ca_bundle: str
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)

    def taken(self) -> list[Call]:
        with self.lock:
            calls, self.calls = self.calls, []
        return calls

    def seen(self) -> list[Call]:
        with self.lock:
            return list(self.calls)


def _handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            request = body["request"]
            recorder.record(Call(
                path=self.path.split("?")[0], operation=request["operation"], sub_resource=request.get("subResource"),
                username=request.get("userInfo", {}).get("username", ""), kind=request["kind"]["kind"],
                name=request.get("name", ""), dry_run=bool(request.get("dryRun"))))
            answer = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                 "response": {"uid": request["uid"], "allowed": True}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def recorder() -> Iterator[Recorder]:
    cert, key = self_signed_pem("127.0.0.1")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as folder:  # load_cert_chain reads files only
        (Path(folder) / "c.pem").write_bytes(cert)
        (Path(folder) / "k.pem").write_bytes(key)
        context.load_cert_chain(str(Path(folder) / "c.pem"), str(Path(folder) / "k.pem"))
    recorder = Recorder(url="", ca_bundle=base64.b64encode(cert).decode())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(recorder))
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    recorder.url = f"https://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


def copies(recorder: Recorder, ns: str, suffix: str) -> list[dict[str, Any]]:
    """The project's four pod webhooks, built by its own functions, calling the recorder and
    seeing only namespace `ns`."""
    made = [
        *admissionconfig.webhook_configurations({"url": recorder.url + "/controller",
                                                 "caBundle": recorder.ca_bundle}),
        *bridge_admission.webhook_configurations({"url": recorder.url + "/bridge",
                                                  "caBundle": recorder.ca_bundle}, enforce_use=True),
    ]
    for config in made:
        config["metadata"] = {"name": f"{config['metadata']['name']}-{suffix}"}
        for hook in config["webhooks"]:
            hook["failurePolicy"] = "Fail"
            hook["namespaceSelector"] = {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns]}]}
    return made


def _path(config: Mapping[str, Any]) -> str:
    plural = "mutatingwebhookconfigurations" if config["kind"].startswith("Mutating") else \
        "validatingwebhookconfigurations"
    return f"{ADMISSIONREGISTRATION}/{plural}"


@contextlib.contextmanager
def registered(api: Api, configs: list[dict[str, Any]]) -> Iterator[None]:
    try:
        for config in configs:
            api.create(_path(config), config)
        yield
    finally:
        for config in configs:
            api.delete(f"{_path(config)}/{config['metadata']['name']}")


def exempt_from_the_operators(api: Api, ns: str) -> None:
    api.merge_patch(f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {constants.ADMISSION_LABEL: "disabled"}}})


def dry_run_create(api: Api, ns: str, pod: Mapping[str, Any]) -> tuple[int, Any]:
    return api.request("POST", f"/api/v1/namespaces/{ns}/pods", pod, params={"dryRun": "All"})


@pytest.fixture
def hooks(api: Api, ns: str, recorder: Recorder) -> Iterator[Recorder]:
    """The four copies registered for `ns` and taking effect (the API server loads configurations
    asynchronously): a dry-run pod naming both kinds of network reaches all four."""
    exempt_from_the_operators(api, ns)
    with registered(api, copies(recorder, ns, secrets.token_hex(3))):
        probe = pod_manifest("probe", networks=[{"podNetworkName": "default"}],
                             annotations={SELECTION: "somewhere"})

        def all_four() -> bool:
            code, body = dry_run_create(api, ns, probe)
            assert code == 201, body
            seen = {c.path for c in recorder.seen() if c.dry_run}
            assert seen == ALL, f"called so far: {sorted(seen)}"
            return True

        eventually(all_four, "the four copied webhooks are called", timeout=60)
        recorder.taken()
        yield recorder
        recorder.taken()


def reached(recorder: Recorder, action: Callable[[], Any]) -> set[str]:
    """The webhooks `action`'s request reached (a request returns once its webhooks answered)."""
    recorder.taken()
    action()
    return {c.path for c in recorder.taken() if not c.dry_run}


def unscheduled(name: str, **kw: Any) -> dict[str, Any]:
    """A pod no scheduler picks up, so that the test alone binds it."""
    return pod_manifest(name, schedulerName=f"nobody-{secrets.token_hex(2)}", **kw)


def binding(name: str, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    # bound to a node that does not exist: no kubelet ever runs the pod
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": f"nowhere-{secrets.token_hex(2)}"}}


def test_each_pod_request_reaches_exactly_the_webhooks_its_match_conditions_select(
        api: Api, ns: str, hooks: Recorder) -> None:
    pods = f"/api/v1/namespaces/{ns}/pods"
    default = json.dumps([{"podNetworkName": "default"}])
    hotplugged = json.dumps([{"podNetworkName": "default"}, {"podNetworkName": "blue"}])

    # CREATE: every pod reaches the controller's webhooks and the bridge's mutating one; the
    # bridge's validating one only a pod carrying an NPWG selection
    assert reached(hooks, lambda: api.create(pods, unscheduled("plain"))) == \
        {CONTROLLER_MUTATE, CONTROLLER_VALIDATE, BRIDGE_MUTATE}
    assert reached(hooks, lambda: api.create(pods, unscheduled("named", annotations={NETWORKS: default}))) == \
        {CONTROLLER_MUTATE, CONTROLLER_VALIDATE, BRIDGE_MUTATE}
    assert reached(hooks, lambda: api.create(pods, unscheduled("npwg", annotations={SELECTION: "nets/a"}))) == ALL

    # UPDATE of the pod: only a change of the networks, to the controller's two
    assert reached(hooks, lambda: api.merge_patch(f"{pods}/named", {"metadata": {"labels": {"a": "b"}}})) == set()
    assert reached(hooks, lambda: api.merge_patch(f"{pods}/plain", {"metadata": {"labels": {"a": "b"}}})) == set()
    assert reached(hooks, lambda: api.merge_patch(f"{pods}/npwg", {"metadata": {"labels": {"a": "b"}}})) == set()
    assert reached(hooks, lambda: api.merge_patch(
        f"{pods}/named", {"metadata": {"annotations": {NETWORKS: hotplugged}}})) == \
        {CONTROLLER_MUTATE, CONTROLLER_VALIDATE}
    assert reached(hooks, lambda: api.merge_patch(
        f"{pods}/plain", {"metadata": {"annotations": {NETWORKS: default}}})) == \
        {CONTROLLER_MUTATE, CONTROLLER_VALIDATE}
    assert reached(hooks, lambda: api.merge_patch(
        f"{pods}/named", {"metadata": {"annotations": {NETWORKS: None}}})) == \
        {CONTROLLER_MUTATE, CONTROLLER_VALIDATE}
    assert reached(hooks, lambda: api.merge_patch(
        f"{pods}/npwg", {"metadata": {"annotations": {SELECTION: "nets/b"}}})) == {BRIDGE_VALIDATE}

    # UPDATE of pods/status: status alone reaches nothing; the networks, the admission record or
    # the NPWG selection changed through it reach the validating webhooks that check them
    condition = {"status": {"conditions": [{"type": "example.com/probe", "status": "True"}]}}
    assert reached(hooks, lambda: api.merge_patch(f"{pods}/named/status", condition)) == set()
    assert reached(hooks, lambda: api.merge_patch(f"{pods}/npwg/status", condition)) == set()
    assert reached(hooks, lambda: api.merge_patch(
        f"{pods}/named/status", {"metadata": {"annotations": {NETWORKS: hotplugged}}})) == {CONTROLLER_VALIDATE}
    assert reached(hooks, lambda: api.merge_patch(
        f"{pods}/plain/status",
        {"metadata": {"annotations": {constants.ATTACHMENT_NETWORKS_ANNOTATION: "{}"}}})) == {CONTROLLER_VALIDATE}
    assert reached(hooks, lambda: api.merge_patch(
        f"{pods}/npwg/status", {"metadata": {"annotations": {SELECTION: "nets/c"}}})) == {BRIDGE_VALIDATE}

    # CREATE of pods/binding (what kube-scheduler sends): only one carrying a network annotation
    # (the API server copies a Binding's annotations onto the pod)
    for name in ("b1", "b2", "b3", "b4"):
        api.create(pods, unscheduled(name))
    assert reached(hooks, lambda: api.create(f"{pods}/b1/binding", binding("b1"))) == set()
    assert reached(hooks, lambda: api.create(f"{pods}/b2/binding", binding("b2", {"example.com/x": "y"}))) == set()
    assert reached(hooks, lambda: api.create(f"{pods}/b3/binding", binding("b3", {NETWORKS: hotplugged}))) == \
        {CONTROLLER_VALIDATE}
    assert reached(hooks, lambda: api.create(f"{pods}/b4/binding", binding("b4", {SELECTION: "nets/d"}))) == \
        {BRIDGE_VALIDATE}
    bound = api.get(f"{pods}/b3")
    assert bound["spec"]["nodeName"].startswith("nowhere-")
    assert bound["metadata"]["annotations"][NETWORKS] == hotplugged, "the Binding's annotations reach the pod"

    # pods/ephemeralcontainers: no webhook's rules name it, and nothing refuses it
    debug = {"spec": {"ephemeralContainers": [{"name": "debug", "image": BUSYBOX, "imagePullPolicy": "Never",
                                               "command": ["true"]}]}}
    assert reached(hooks, lambda: api.merge_patch(f"{pods}/named/ephemeralcontainers", debug)) == set()
    assert [c["name"] for c in api.get(f"{pods}/named")["spec"]["ephemeralContainers"]] == ["debug"]

    # the operations seen are the ones the rules name: no DELETE, no other kind
    assert reached(hooks, lambda: api.delete(f"{pods}/b1")) == set()


def test_the_kubelet_and_kube_scheduler_never_call_the_validating_webhooks(
        api: Api, ns: str, hooks: Recorder, node: Node) -> None:
    pods = f"/api/v1/namespaces/{ns}/pods"
    api.create(pods, pod_manifest("runs"))
    running = wait_phase(api, ns, "runs")
    assert running["spec"]["nodeName"] == node.name
    calls = hooks.seen()
    # kube-scheduler bound it and the kubelet reported it Running: neither was held by a webhook
    assert not [c for c in calls if c.username.startswith(("system:node:", "system:kube-scheduler"))], calls
    assert [(c.path, c.operation, c.sub_resource) for c in calls if c.path in VALIDATING] == \
        [(CONTROLLER_VALIDATE, "CREATE", None)]


def test_without_the_has_guard_the_api_server_refuses_every_plain_pod_create(
        api: Api, ns: str, recorder: Recorder) -> None:
    (current,) = admissionconfig.VALIDATE_MATCH_CONDITIONS
    old = current["expression"].replace("has(request.subResource) && ", "")
    assert old != current["expression"]
    (validating,) = [c for c in copies(recorder, ns, secrets.token_hex(3))
                     if c["webhooks"][0]["clientConfig"]["url"].endswith(CONTROLLER_VALIDATE)]
    validating["webhooks"][0]["matchConditions"] = [{**current, "expression": old}]
    exempt_from_the_operators(api, ns)
    recorder.taken()
    with registered(api, [validating]):
        def refused() -> Any:
            code, body = dry_run_create(api, ns, pod_manifest("plain"))
            return body if code >= 400 else None

        body = eventually(refused, "the old expression takes effect", timeout=60)
    assert "no such key: subResource" in body["message"], body
    assert not recorder.taken(), "the API server refused before calling the webhook"
    with pytest.raises(ApiError):  # and nothing was created
        api.get(f"/api/v1/namespaces/{ns}/pods/plain")
