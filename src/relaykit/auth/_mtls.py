"""``MTLSAuthenticator``: the client certificate the TLS handshake verified is the credential.

Invariants:

* The TLS layer verifies the certificate chain (``--ssl-ca-certs``: ``ssl.CERT_OPTIONAL`` on HTTP, where a
  certificate that is sent must verify or the handshake fails; a gRPC server credential that requires client auth):
  this authenticator only names what was verified, and never sees an unverified certificate. A connection without
  one has no credential of this kind, so the gate answers 401 unless another scheme names the caller.
* The principal is ``mtls:<subject>``, the subject as an RFC 4514 string (``CN=alice,O=Example``), identical on HTTP
  and gRPC because both hand over the DER certificate and the name is computed here.
"""

from __future__ import annotations

from collections import OrderedDict

from relaykit._card import MutualTlsSecurityScheme, SecurityScheme
from relaykit._errors import AuthenticationRequiredError
from relaykit._principal import Principal
from relaykit.auth._gate import AuthRequest

__all__ = ["MTLSAuthenticator", "certificate_subject"]


def certificate_subject(der: bytes) -> str:
    """The RFC 4514 subject of a DER certificate."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


class MTLSAuthenticator:
    """Mutual TLS: the verified client certificate's subject is the principal.

    >>> MTLSAuthenticator().security_scheme.to_json()
    b'{"mtlsSecurityScheme":{}}'
    """

    hint = "present a client certificate"

    def __init__(self, *, scheme_name: str = "mtls", cache: int = 1024) -> None:
        self.scheme_name = scheme_name
        self._subjects: OrderedDict[bytes, str] = OrderedDict()
        self._cache = cache

    @property
    def security_scheme(self) -> SecurityScheme:
        """``mtlsSecurityScheme``."""
        return SecurityScheme(mtls_security_scheme=MutualTlsSecurityScheme())

    @property
    def challenge(self) -> str:
        """No registered HTTP scheme names a client certificate: this one tells the client what to present (a 401
        must carry at least one challenge, RFC 9110 §15.5.2)."""
        return 'mTLS realm="a2a"'

    async def authenticate(self, request: AuthRequest) -> Principal | None:
        """``mtls:<subject>`` when the connection presented a verified certificate; None otherwise."""
        der = request.peer_cert
        if der is None:
            return None
        subject = self._subjects.get(der)
        if subject is None:
            try:
                subject = certificate_subject(der)
            except ValueError:
                raise AuthenticationRequiredError("the client certificate cannot be read") from None
            self._subjects[der] = subject
            if len(self._subjects) > self._cache:
                self._subjects.popitem(last=False)
        if not subject:
            raise AuthenticationRequiredError("the client certificate has an empty subject")
        return Principal("mtls", subject)

    async def start(self) -> None:
        """Nothing to fetch."""

    async def close(self) -> None:
        """Nothing to close."""
