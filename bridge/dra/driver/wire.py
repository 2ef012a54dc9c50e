"""The kubelet's two gRPC services over unix sockets, wired by hand from their method paths.

- `Registration` (`/pluginregistration.Registration/...`) on the socket the kubelet's plugin
  watcher finds in its `plugins_registry` folder: `GetInfo` says what the plugin is, and the
  kubelet's `NotifyRegistrationStatus` says whether it took it.
- `DRAPlugin` v1 (`/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/...`) on the endpoint `GetInfo`
  names: `NodePrepareResources` and `NodeUnprepareResources`.

The DRAPlugin socket also answers the kubelet's device health stream,
`/v1alpha1.DRAResourceHealth/NodeWatchResources` (gate ResourceHealthStatus, on in the kit's
v1.36 kubelet, which opens it on every plugin whatever it registered, and logs an error every 5 s
for a plugin that does not serve it): `health_handler` keeps the stream open and sends nothing.
A PodNetwork's device has no health of its own; a PodNetwork that is not Ready loses its device.

Each is a `grpc.aio` server of its own, so a socket serves only what it is for. The clients here
are the kubelet's side of the same calls, for tests and diagnosis.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from bridge.dra.driver.protos import dra_v1_pb2 as dra_pb
from bridge.dra.driver.protos import pluginregistration_v1_pb2 as reg_pb

DRA_SERVICE = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
#: The kubelet's device health service (k8s.io/kubelet/pkg/apis/dra-health/v1alpha1: proto package
#: `v1alpha1`; the path as the kit's kubelet binary spells it).
HEALTH_SERVICE = "v1alpha1.DRAResourceHealth"
REGISTRATION_SERVICE = "pluginregistration.Registration"

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)


class DraService(Protocol):
    async def prepare(
        self, request: dra_pb.NodePrepareResourcesRequest) -> dra_pb.NodePrepareResourcesResponse: ...

    async def unprepare(
        self, request: dra_pb.NodeUnprepareResourcesRequest) -> dra_pb.NodeUnprepareResourcesResponse: ...


class RegistrationService(Protocol):
    def info(self) -> reg_pb.PluginInfo: ...

    def notified(self, status: reg_pb.RegistrationStatus) -> None: ...


def _unary(call: Callable[[Req], Awaitable[Resp]],
           request_type: type[Req]) -> grpc.RpcMethodHandler[Req, Resp]:
    async def behaviour(request: Req, context: grpc.aio.ServicerContext[Req, Resp]) -> Resp:
        return await call(request)

    return grpc.unary_unary_rpc_method_handler(
        behaviour,  # grpc.aio awaits a coroutine behaviour
        request_deserializer=request_type.FromString,
        response_serializer=lambda message: message.SerializeToString())


def dra_handler(service: DraService) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(DRA_SERVICE, {
        "NodePrepareResources": _unary(service.prepare, dra_pb.NodePrepareResourcesRequest),
        "NodeUnprepareResources": _unary(service.unprepare, dra_pb.NodeUnprepareResourcesRequest),
    })


def health_handler() -> grpc.GenericRpcHandler:
    """NodeWatchResources: open until the server stops, no message (no health to report). Its
    request is empty and no response is ever sent, so no message type is needed."""
    async def watch(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> AsyncIterator[bytes]:
        await asyncio.Event().wait()  # until cancelled: the kubelet hangs up, or the server stops
        yield b""  # never reached; makes this an async generator, a stream

    return grpc.method_handlers_generic_handler(HEALTH_SERVICE, {
        "NodeWatchResources": grpc.unary_stream_rpc_method_handler(
            watch,  # grpc.aio streams from an async generator
            request_deserializer=lambda raw: raw, response_serializer=lambda raw: raw)})


def registration_handler(service: RegistrationService) -> grpc.GenericRpcHandler:
    async def info(_: reg_pb.InfoRequest) -> reg_pb.PluginInfo:
        return service.info()

    async def notified(status: reg_pb.RegistrationStatus) -> reg_pb.RegistrationStatusResponse:
        service.notified(status)
        return reg_pb.RegistrationStatusResponse()

    return grpc.method_handlers_generic_handler(REGISTRATION_SERVICE, {
        "GetInfo": _unary(info, reg_pb.InfoRequest),
        "NotifyRegistrationStatus": _unary(notified, reg_pb.RegistrationStatus),
    })


def remove_socket(path: str) -> None:
    """A socket file left by an earlier run (the kubelet's plugin watcher asks each start to listen
    anew); anything else at that path is left alone and reported."""
    with contextlib.suppress(FileNotFoundError):
        import stat

        mode = os.lstat(path).st_mode
        if not stat.S_ISSOCK(mode):
            raise OSError(f"{path} exists and is not a socket; remove it or choose another folder")
        os.unlink(path)


async def serve(handler: grpc.GenericRpcHandler, path: str, *more: grpc.GenericRpcHandler) -> grpc.aio.Server:
    """A started server of `handler` (and `more`) on the unix socket `path` (its folder made, a stale
    socket replaced). Raises OSError when it cannot listen there."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    remove_socket(path)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler, *more))
    try:
        bound = server.add_insecure_port(f"unix://{path}")
    except RuntimeError as exc:  # grpcio says so for a path too long, a folder it cannot write
        bound, why = 0, str(exc)
    else:
        why = ""
    if bound == 0:
        raise OSError(f"cannot listen on the unix socket {path} ({why or 'gRPC refused it'})")
    await server.start()
    return server


class _Calls:
    def __init__(self, channel: grpc.aio.Channel, service: str) -> None:
        self.channel, self.service = channel, service

    def unary(self, method: str, response_type: type[Resp]) -> Callable[[Message], Awaitable[Resp]]:
        call: grpc.aio.UnaryUnaryMultiCallable[Message, Resp] = self.channel.unary_unary(
            f"/{self.service}/{method}", request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString)

        async def invoke(request: Message) -> Resp:
            answer: Any = await call(request)
            assert isinstance(answer, response_type)
            return answer

        return invoke


class DraClient:
    """The kubelet's side of DRAPlugin v1 at the unix socket `path`."""

    def __init__(self, path: str) -> None:
        self.channel = grpc.aio.insecure_channel(f"unix://{path}")
        calls = _Calls(self.channel, DRA_SERVICE)
        self._prepare = calls.unary("NodePrepareResources", dra_pb.NodePrepareResourcesResponse)
        self._unprepare = calls.unary("NodeUnprepareResources", dra_pb.NodeUnprepareResourcesResponse)

    async def prepare(self, *claims: dra_pb.Claim) -> dra_pb.NodePrepareResourcesResponse:
        return await self._prepare(dra_pb.NodePrepareResourcesRequest(claims=claims))

    async def unprepare(self, *claims: dra_pb.Claim) -> dra_pb.NodeUnprepareResourcesResponse:
        return await self._unprepare(dra_pb.NodeUnprepareResourcesRequest(claims=claims))

    async def close(self) -> None:
        await self.channel.close()


class RegistrationClient:
    """The kubelet's plugin watcher's side of Registration at the unix socket `path`."""

    def __init__(self, path: str) -> None:
        self.channel = grpc.aio.insecure_channel(f"unix://{path}")
        calls = _Calls(self.channel, REGISTRATION_SERVICE)
        self._info = calls.unary("GetInfo", reg_pb.PluginInfo)
        self._notify = calls.unary("NotifyRegistrationStatus", reg_pb.RegistrationStatusResponse)

    async def info(self) -> reg_pb.PluginInfo:
        return await self._info(reg_pb.InfoRequest())

    async def notify(self, registered: bool, error: str = "") -> None:
        await self._notify(reg_pb.RegistrationStatus(plugin_registered=registered, error=error))

    async def close(self) -> None:
        await self.channel.close()


__all__ = ["DRA_SERVICE", "HEALTH_SERVICE", "REGISTRATION_SERVICE", "DraClient", "DraService",
           "RegistrationClient", "RegistrationService", "dra_handler", "health_handler",
           "registration_handler", "remove_socket", "serve"]
