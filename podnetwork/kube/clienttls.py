"""The TLS context of a client: how to verify the API server, which client certificate to present."""

from __future__ import annotations

import ssl

from podnetwork.kube import certificates
from podnetwork.kube.authentication import Authenticator
from podnetwork.kube.credentialmodel import Credentials, CredentialsError


def ssl_context(credentials: Credentials, authenticator: Authenticator | None = None) -> ssl.SSLContext:
    """How to verify the server and which client certificate to present. Raises `CredentialsError`.

    An exec plugin that answers with a client certificate is run here (once; a
    rotated plugin certificate needs a new client).
    """
    creds = credentials
    what = creds.describe
    try:
        ctx = ssl.create_default_context(cafile=creds.ca_file, cadata=creds.ca_data)
    except FileNotFoundError:
        raise CredentialsError(f"{what}: certificate-authority {creds.ca_file}: no such file") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise CredentialsError(f"{what}: the certificate authority cannot be used: {exc}") from None
    if creds.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    cert_data, key_data = creds.client_cert_data, creds.client_key_data
    if creds.exec_plugin is not None and not (creds.client_cert_file or cert_data):
        result = (authenticator or Authenticator(creds)).exec_result()
        if result is not None and result.client_cert_data and result.client_key_data:
            cert_data, key_data = result.client_cert_data, result.client_key_data
    try:
        # *-data stay in memory (`certificates.load_chain`); files are read where they are.
        cert: str | bytes | None = cert_data.encode("ascii") if cert_data else creds.client_cert_file
        key: str | bytes | None = key_data.encode("ascii") if key_data else creds.client_key_file
        if cert and key:
            certificates.load_chain(ctx, cert, key)
    except FileNotFoundError as exc:
        raise CredentialsError(f"{what}: client certificate or key {exc.filename}: no such file") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise CredentialsError(f"{what}: the client certificate cannot be used: {exc}") from None
    return ctx


__all__ = ["ssl_context"]
