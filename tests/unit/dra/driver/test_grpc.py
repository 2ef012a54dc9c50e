"""The kubelet's two services over real unix sockets, called with a real gRPC client as the kubelet
calls them: GetInfo and NotifyRegistrationStatus; NodePrepareResources / NodeUnprepareResources
per claim, idempotent, kept across a restart of the driver (a new server over the same state)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.dra.driver import plugin, wire
from bridge.dra.driver.protos import dra_v1_pb2 as dra_pb
from bridge.dracontract import names, state

DRIVER = names.DEFAULT_DRIVER
NODE = "n1"
UIDS = ["11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"]


class Claims:
    """The API's ResourceClaims as the driver reads them, counting reads."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads = 0
        self.failure: Exception | None = None

    def add(self, name: str, uid: str, device: str, *, pool: str = NODE) -> dra_pb.Claim:
        self.objects[("ns", name)] = {
            "metadata": {"namespace": "ns", "name": name, "uid": uid},
            "status": {"allocation": {"devices": {"results": [
                {"request": "net0", "driver": DRIVER, "pool": pool, "device": device}]}}}}
        return dra_pb.Claim(namespace="ns", name=name, uid=uid)

    async def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        if self.failure is not None:
            raise self.failure
        return self.objects.get((namespace, name))


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dra-"))  # short: a unix socket's path is at most 105 bytes
    try:
        yield path
    finally:
        shutil.rmtree(path)


class Driver:
    def __init__(self, folder: Path, reader: Claims) -> None:
        self.folder, self.reader = folder, reader
        self.endpoint = names.plugin_socket(str(folder / "plugins"), DRIVER)
        self.registration_path = names.registration_socket(str(folder / "registry"), DRIVER)
        self.registration = plugin.Registration(DRIVER, self.endpoint)
        self.plugin = plugin.Plugin(driver=DRIVER, node=NODE, store=state.Store(folder / "state"), reader=reader,
                                    podnetwork_of={"blue": "blue"}.get)

    async def start(self) -> None:
        self.servers = [await wire.serve(wire.dra_handler(self.plugin), self.endpoint, wire.health_handler()),
                        await wire.serve(wire.registration_handler(self.registration), self.registration_path)]
        self.client = wire.DraClient(self.endpoint)

    async def stop(self) -> None:
        await self.client.close()
        for server in self.servers:
            await server.stop(None)


@pytest.fixture
async def driver(folder: Path) -> AsyncIterator[Driver]:
    running = Driver(folder, Claims())
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


async def test_getinfo_says_a_dra_plugin_of_the_driver_at_its_endpoint_speaking_v1(driver: Driver) -> None:
    client = wire.RegistrationClient(driver.registration_path)
    try:
        info = await client.info()
        assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
            "DRAPlugin", DRIVER, driver.endpoint, ["v1.DRAPlugin"])
        assert not driver.registration.registered.is_set()
        await client.notify(True)
        assert driver.registration.registered.is_set()
        await client.notify(False, "no such version")
        assert not driver.registration.registered.is_set()
    finally:
        await client.close()


async def test_prepare_answers_each_claim_records_it_and_is_idempotent(driver: Driver) -> None:
    good = driver.reader.add("good", UIDS[0], "blue")
    other = driver.reader.add("elsewhere", UIDS[1], "blue", pool="n2")
    answer = await driver.client.prepare(good, other)
    assert list(answer.claims[UIDS[0]].devices) == [dra_pb.Device(request_names=["net0"], pool_name=NODE,
                                                                  device_name="blue")]
    assert answer.claims[UIDS[0]].error == ""
    assert "another node's pool" in answer.claims[UIDS[1]].error
    record = state.Store(driver.folder / "state").get(UIDS[0])
    assert record is not None and record.devices[0].podnetwork == "blue"
    assert state.Store(driver.folder / "state").uids() == [UIDS[0]]
    reads = driver.reader.reads
    again = await driver.client.prepare(good)
    assert again.claims[UIDS[0]] == answer.claims[UIDS[0]]
    assert driver.reader.reads == reads  # answered from the record


async def test_a_claim_that_cannot_be_read_or_does_not_exist_is_that_claims_error(driver: Driver) -> None:
    missing = dra_pb.Claim(namespace="ns", name="nope", uid=UIDS[0])
    answer = await driver.client.prepare(missing)
    assert "does not exist" in answer.claims[UIDS[0]].error
    driver.reader.add("c", UIDS[1], "blue")
    driver.reader.failure = RuntimeError("the API server is unreachable")
    answer = await driver.client.prepare(dra_pb.Claim(namespace="ns", name="c", uid=UIDS[1]))
    assert "cannot read" in answer.claims[UIDS[1]].error and "unreachable" in answer.claims[UIDS[1]].error
    assert state.Store(driver.folder / "state").uids() == []


async def test_a_bad_uid_is_refused_and_names_no_file(driver: Driver) -> None:
    answer = await driver.client.prepare(dra_pb.Claim(namespace="ns", name="c", uid="../../etc"))
    assert "not a Kubernetes uid" in answer.claims["../../etc"].error
    unanswer = await driver.client.unprepare(dra_pb.Claim(namespace="ns", name="c", uid="../../etc"))
    assert "not a Kubernetes uid" in unanswer.claims["../../etc"].error


async def test_unprepare_releases_once_and_then_is_a_no_op(driver: Driver) -> None:
    claim = driver.reader.add("c", UIDS[0], "blue")
    await driver.client.prepare(claim)
    first = await driver.client.unprepare(claim)
    second = await driver.client.unprepare(claim)
    assert first.claims[UIDS[0]].error == second.claims[UIDS[0]].error == ""
    assert state.Store(driver.folder / "state").uids() == []


async def test_a_restarted_driver_answers_prepare_from_its_record_and_unprepares(folder: Path) -> None:
    reader = Claims()
    first = Driver(folder, reader)
    await first.start()
    claim = reader.add("c", UIDS[0], "blue")
    prepared = await first.client.prepare(claim)
    await first.stop()
    reader.objects.clear()  # the claim is gone from the API: only the record remains

    second = Driver(folder, reader)
    await second.start()  # the sockets of the first run are replaced
    try:
        assert (await second.client.prepare(claim)).claims[UIDS[0]] == prepared.claims[UIDS[0]]
        assert (await second.client.unprepare(claim)).claims[UIDS[0]].error == ""
        assert state.Store(folder / "state").uids() == []
    finally:
        await second.stop()


async def test_a_file_that_is_not_a_socket_is_not_replaced(folder: Path) -> None:
    path = folder / "not-a-socket"
    path.write_text("keep me")
    with pytest.raises(OSError, match="is not a socket"):
        await wire.serve(wire.dra_handler(Driver(folder, Claims()).plugin), str(path))
    assert path.read_text() == "keep me"


async def test_grpc_listens_on_a_socket_path_of_the_longest_length_the_driver_allows_and_no_longer(
        folder: Path) -> None:
    """`names.MAX_SOCKET_PATH` is what grpcio's core takes: the driver refuses longer paths at start."""
    def path(length: int) -> str:
        return str(folder / ("s" * (length - len(str(folder)) - 1)))

    handler = wire.dra_handler(Driver(folder, Claims()).plugin)
    server = await wire.serve(handler, path(names.MAX_SOCKET_PATH))
    await server.stop(None)
    assert names.socket_problem(path(names.MAX_SOCKET_PATH), "--x") is None
    assert names.socket_problem(path(names.MAX_SOCKET_PATH + 1), "--x") is not None
    with pytest.raises(OSError, match="cannot listen on the unix socket"):
        await wire.serve(handler, path(names.MAX_SOCKET_PATH + 1))


async def test_the_health_stream_the_kubelet_opens_stays_open_and_says_nothing(driver: Driver) -> None:
    """The kit's kubelet opens NodeWatchResources on every plugin and logs an error every 5 s for
    one that does not serve it; the driver keeps it open with no message."""
    stream = driver.client.channel.unary_stream(f"/{wire.HEALTH_SERVICE}/NodeWatchResources",
                                                request_serializer=lambda raw: raw,
                                                response_deserializer=lambda raw: raw)
    call = stream(b"")
    reader = asyncio.ensure_future(call.read())
    claim = driver.reader.add("c", UIDS[0], "blue")
    await driver.client.prepare(claim)  # a round trip on the same connection, after the stream opened
    assert not reader.done() and not call.done()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
