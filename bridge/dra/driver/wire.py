"""The kubelet's two gRPC services over unix sockets, wired by hand from their method paths.

- `Registration` (`/pluginregistration.Registration/...`) on the socket the kubelet's plugin
  watcher finds in its `plugins_registry` folder: `GetInfo` says what the plugin is, and the
  kubelet's `NotifyRegistrationStatus` says whether it took it.
- `DRAPlugin` v1 (`/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/...`) on the endpoint `GetInfo`
  names: `NodePrepareResources` and `NodeUnprepareResources`.

Each is a `grpc.aio` server of its own, so a socket serves only what it is for. The clients here
are the kubelet's side of the same calls, for tests and diagnosis.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from bridge.dra.driver.protos import dra_v1_pb2 as dra_pb
from bridge.dra.driver.protos import pluginregistration_v1_pb2 as reg_pb

DRA_SERVICE = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
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


async def serve(handler: grpc.GenericRpcHandler, path: str) -> grpc.aio.Server:
    """A started server of `handler` on the unix socket `path` (its folder made, a stale socket
    replaced). Raises OSError when it cannot listen there."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    remove_socket(path)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
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


__all__ = ["DRA_SERVICE", "REGISTRATION_SERVICE", "DraClient", "DraService", "RegistrationClient",
           "RegistrationService", "dra_handler", "registration_handler", "remove_socket", "serve"]
