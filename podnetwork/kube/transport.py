"""lightkube clients whose transport is ours: TLS and the Authorization header from `credentials`.

lightkube is given a transport (its public `transport=` parameter) that presents the
client certificate, verifies the server as the kubeconfig says, sends the SNI name
it names and sets the Authorization header of every request: token files re-read,
exec plugins re-run on expiry, and once again after a 401. lightkube's own kubeconfig
reading would support one file, no v1 exec plugin and no contexts without a user.
"""

from __future__ import annotations

import httpx2
import lightkube
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import Cluster, Context, User

from podnetwork.kube.credentials import Authenticator, Credentials, ssl_context
from podnetwork.kube.useragent import user_agent


def _prepare(credentials: Credentials, request: httpx2.Request) -> None:
    """Who sends (the API server names the field manager after it) and the TLS name to ask for."""
    request.headers["User-Agent"] = user_agent()
    if credentials.tls_server_name:
        request.extensions = {**request.extensions, "sni_hostname": credentials.tls_server_name}


class Transport(httpx2.BaseTransport):
    """httpx2's transport with our TLS, and the Authorization header set on every request."""

    def __init__(self, credentials: Credentials, auth: Authenticator) -> None:
        self._creds, self._auth = credentials, auth
        self._inner = httpx2.HTTPTransport(verify=ssl_context(credentials, auth), proxy=credentials.proxy_url,
                                           trust_env=False)

    def _send(self, request: httpx2.Request) -> httpx2.Response:
        header = self._auth.header()
        if header:
            request.headers["Authorization"] = header
        _prepare(self._creds, request)
        return self._inner.handle_request(request)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self._send(request)
        if response.status_code == 401 and self._auth.renewable:
            response.close()
            self._auth.invalidate()  # a rotated token file or an expired plugin token
            response = self._send(request)
        return response

    def close(self) -> None:
        self._inner.close()


class AsyncTransport(httpx2.AsyncBaseTransport):
    """`Transport` for asyncio."""

    def __init__(self, credentials: Credentials, auth: Authenticator) -> None:
        self._creds, self._auth = credentials, auth
        self._inner = httpx2.AsyncHTTPTransport(verify=ssl_context(credentials, auth),
                                                proxy=credentials.proxy_url, trust_env=False)

    async def _send(self, request: httpx2.Request) -> httpx2.Response:
        header = await self._auth.aheader()
        if header:
            request.headers["Authorization"] = header
        _prepare(self._creds, request)
        return await self._inner.handle_async_request(request)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._send(request)
        if response.status_code == 401 and self._auth.renewable:
            await response.aclose()
            self._auth.invalidate()
            response = await self._send(request)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _config(credentials: Credentials) -> SingleConfig:
    # lightkube builds an SSL context and auth from this config; the transport replaces both
    # (httpx uses no `verify` when given a transport), so it gets the server and nothing else.
    # `insecure` only spares it loading the system's CA bundle for a context nobody uses.
    return SingleConfig(context_name=credentials.context or "podnetwork",
                        context=Context(cluster="podnetwork", user="podnetwork",
                                        namespace=credentials.namespace),
                        cluster=Cluster(server=credentials.server, insecure=True), user=User())


def sync_client(credentials: Credentials, *, timeout: float = 30.0) -> lightkube.Client:
    """A blocking lightkube client. Raises `CredentialsError` when the TLS material is unusable."""
    transport = Transport(credentials, Authenticator(credentials))
    return lightkube.Client(config=_config(credentials), timeout=httpx2.Timeout(timeout), trust_env=False,
                            transport=transport, lazy=False)


def async_client(credentials: Credentials, *, timeout: float = 30.0) -> lightkube.AsyncClient:
    """An asyncio lightkube client. Raises `CredentialsError` when the TLS material is unusable."""
    transport = AsyncTransport(credentials, Authenticator(credentials))
    return lightkube.AsyncClient(config=_config(credentials), timeout=httpx2.Timeout(timeout),
                                 trust_env=False, transport=transport, lazy=False)


__all__ = ["AsyncTransport", "Transport", "async_client", "sync_client"]
