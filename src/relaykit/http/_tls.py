"""The TLS client certificate of an HTTP request, for mutual-TLS authentication.

ASGI carries it in the TLS extension (``scope["extensions"]["tls"]["client_cert_chain"]``, PEM, leaf first). uvicorn
does not fill that extension in, so ``client_cert_protocol`` wraps uvicorn's HTTP protocol class: on each TLS
connection it reads the certificate the handshake verified and adds it to every request's scope on that connection.
``relaykit serve --ssl-ca-certs`` installs it; any ASGI server that fills the extension in works without it.
"""

from __future__ import annotations

import ssl
from typing import Any

__all__ = ["client_cert_protocol", "peer_certificate"]

_DER_KEY = "relaykit.peer_cert"


def peer_certificate(scope: Any) -> bytes | None:
    """The DER client certificate of the connection this request came on, if the TLS handshake verified one."""
    der = scope.get(_DER_KEY)
    if der:
        return der  # type: ignore[no-any-return]
    tls = (scope.get("extensions") or {}).get("tls")
    chain = tls.get("client_cert_chain") if isinstance(tls, dict) else None
    if chain:
        return ssl.PEM_cert_to_DER_cert(chain[0])
    return None


class _WithPeer:
    """The app, with one connection's client certificate added to each request's scope."""

    __slots__ = ("app", "der", "pem")

    def __init__(self, app: Any, der: bytes) -> None:
        self.app = app
        self.der = der
        self.pem = ssl.DER_cert_to_PEM_cert(der)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        scope[_DER_KEY] = self.der
        extensions = scope.setdefault("extensions", {})
        extensions.setdefault("tls", {"client_cert_chain": [self.pem], "client_cert_error": None})
        await self.app(scope, receive, send)


def client_cert_protocol(base: type[Any]) -> type[Any]:
    """A subclass of a uvicorn HTTP protocol class that passes each connection's verified client certificate on."""

    class ClientCertProtocol(base):  # type: ignore[misc]
        app: Any

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if der:
                # uvicorn's HTTP/1.1 protocols read self.app for each request on the connection.
                self.app = _WithPeer(self.app, der)

    ClientCertProtocol.__name__ = ClientCertProtocol.__qualname__ = f"ClientCert{base.__name__}"
    return ClientCertProtocol
