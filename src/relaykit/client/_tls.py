"""TLS material for the client's HTTP connections: the CA bundle to trust and the client certificate to present.

The gRPC channel takes the same two files (``relaykit.client._grpc.channel_credentials``), so one ``ca_certs`` /
``client_cert`` pair secures every binding.
"""

from __future__ import annotations

import ssl

__all__ = ["tls_verify"]


def tls_verify(ca_certs: str | None = None, client_cert: str | tuple[str, str] | None = None) -> ssl.SSLContext | bool:
    """What ``httpx`` should verify with: ``True`` (the system's CAs) without TLS material, else an SSL context that
    trusts ``ca_certs`` and presents ``client_cert`` (``(certfile, keyfile)``, or one PEM file holding both).

    ``Client`` uses it for its own HTTP client; give it to an ``httpx.AsyncClient`` you pass as ``Client(http=…)``
    (and the same ``ca_certs`` / ``client_cert`` to the ``Client`` itself, for gRPC).

    >>> tls_verify()
    True
    """
    if ca_certs is None and client_cert is None:
        return True
    context = ssl.create_default_context(cafile=ca_certs)
    if client_cert is not None:
        certfile, keyfile = (client_cert, None) if isinstance(client_cert, str) else client_cert
        context.load_cert_chain(certfile, keyfile)
    return context
