"""Credentials never travel in clear to another machine unless the caller says so: one rule for every binding.

Rules:

* A connection is *exposed* when it has no TLS (``http://``, ``grpc://``, a bare gRPC ``host:port`` the client
  decided to reach without TLS) and its host is not loopback (``localhost`` and ``*.localhost``, ``127.0.0.0/8``,
  ``::1``). The host is judged as written, never resolved: a name may point elsewhere tomorrow.
* Over an exposed connection the client sends no credential: it raises ``A2AInsecureCredentialsError`` before a
  byte leaves, unless ``Client(allow_insecure_credentials=True)``. A credential is a header named Authorization,
  Proxy-Authorization, Cookie or X-API-Key, the header of an ``APIKeyAuth`` interceptor or of an API-key security
  scheme the card places in a header, a header whose name looks like a credential's (``CREDENTIAL_WORDS``:
  X-Auth-Token, X-Upstream-Secret, Session-Id, …), or a URL's userinfo (httpx sends it as Basic auth). JSON-RPC,
  HTTP+JSON, gRPC (whose metadata are the same headers) and the card request follow the same rule, so a card's choice
  of binding never changes what leaks.
* The decision is made once per connection (``guard``), and so is the check (one compiled pattern per guard); a
  client whose transport has TLS or is loopback checks nothing per call, so the hot path pays one ``is None`` test.

Why refuse rather than warn, on HTTP too: the spec says production MUST use TLS, gRPC stacks already refuse call
credentials on insecure channels (grpc-go's ``RequireTransportSecurity``, grpc-python's call credentials), and a
warning is read after the token has crossed the network. Development on one machine is loopback and unaffected; a
plaintext agent on another host (a container network, a LAN box) needs the one explicit opt-in, which the error names.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from relaykit._errors import A2AInsecureCredentialsError
from relaykit.client._urls import redact_url

__all__ = [
    "CREDENTIAL_HEADERS",
    "CREDENTIAL_WORDS",
    "CredentialGuard",
    "exposed",
    "guard",
    "has_userinfo",
    "refusal",
]

# Lower-case names of the headers that carry a credential whatever the agent's schemes say.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})

# Words that make a header name a credential's wherever they appear in it, case-insensitively: a key or token in a
# header of the caller's own naming (``headers={"X-Auth-Token": …}``, ``-H 'X-Upstream-Secret: …'``) crosses the
# network in clear as surely as an Authorization header does. The list:
#   token       X-Auth-Token, X-Access-Token, X-Csrf-Token
#   api-key     X-Api-Key, Api-Key-Id; apikey (X-ApiKey) and api_key (proxies that keep underscores) too
#   secret      X-Client-Secret, X-Webhook-Secret
#   password    X-Password, X-Db-Password
#   auth        Authorization, Proxy-Authorization, X-Auth-User, X-OAuth-Scopes
#   session     Session-Id, X-Session
#   credential  X-Credentials
# Broad on purpose: a harmless header caught by it (X-Author, say) costs the caller the explicit opt-in, a credential
# it missed cannot be called back. Headers relaykit itself sends (A2A-Version, A2A-Extensions, traceparent,
# tracestate, Accept, Content-Type, Last-Event-ID) hold none of these words.
CREDENTIAL_WORDS = ("token", "api-key", "apikey", "api_key", "secret", "password", "auth", "session", "credential")


def _host(url: str) -> str:
    if "://" in url:
        try:
            return (urlsplit(url).hostname or "").lower()
        except ValueError:
            return ""
    # gRPC's bare ``host:port`` (or ``[v6]:port``), possibly with a userinfo.
    authority = url.split("/", 1)[0].rpartition("@")[2]
    if authority.startswith("["):
        return authority[1:].partition("]")[0].lower()
    host, sep, port = authority.rpartition(":")
    return (host if sep and port.isdigit() and ":" not in host else authority).lower()


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposed(url: str, secure: bool) -> bool:
    """Whether a connection to ``url`` (TLS when ``secure``) would carry credentials in clear to another machine.

    >>> exposed("http://10.0.0.7:8000/", secure=False), exposed("http://127.0.0.1:8000/", secure=False)
    (True, False)
    """
    return not secure and not _is_loopback(_host(url))


def has_userinfo(url: str) -> bool:
    """Whether ``url`` carries a userinfo (``user:password@``)."""
    authority = url.partition("://")[2] if "://" in url else url
    return "@" in authority.split("/", 1)[0]


def refusal(url: str, what: str) -> A2AInsecureCredentialsError:
    """The error for sending ``what`` (never its value) in clear to ``url``."""
    return A2AInsecureCredentialsError(
        f"refusing to send {what} to {redact_url(url)} without TLS: the host is not loopback, so the credential "
        "would cross the network in clear (use https:// or grpcs://, or allow it explicitly: "
        "Client(allow_insecure_credentials=True), relaykit's --insecure-credentials)"
    )


class CredentialGuard:
    """Refuses, on the exposed connection to ``url``, the credential headers: those named in ``CREDENTIAL_HEADERS``
    or ``names`` (any case), and those whose name holds one of ``CREDENTIAL_WORDS``.

    >>> guard = CredentialGuard("http://10.0.0.7/", ["x-agent-key"])
    >>> guard.refuses("X-Agent-Key"), guard.refuses("X-Auth-Token"), guard.refuses("X-Request-Id")
    (True, True, False)
    """

    def __init__(self, url: str, names: Iterable[str] = ()) -> None:
        self.url = url
        self.names = CREDENTIAL_HEADERS.union(name.lower() for name in names)
        # Compiled once, here (a guard is made once per connection), into one pattern: the exact names, then the
        # words anywhere in a name. A request's check is then one search per header, on exposed connections only.
        exact = "|".join(re.escape(name) for name in sorted(self.names))
        words = "|".join(re.escape(word) for word in CREDENTIAL_WORDS)
        self._search = re.compile(f"^(?:{exact})\\Z|{words}", re.IGNORECASE).search

    def refuses(self, name: str) -> bool:
        """Whether the header ``name`` counts as a credential."""
        return self._search(name) is not None

    def check(self, headers: Mapping[str, str]) -> None:
        """Raise ``A2AInsecureCredentialsError`` when ``headers`` hold a credential."""
        search = self._search
        for name in headers:
            if search(name) is not None:
                raise refusal(self.url, f"the {name} header")


def guard(url: str, secure: bool, names: Iterable[str] = (), *, allowed: bool) -> CredentialGuard | None:
    """The guard for a connection to ``url``: ``None`` when it is not exposed or the caller allowed it; raises at once
    when the URL itself carries a userinfo (it goes with every request). ``names``: credential headers besides the
    usual ones (an ``APIKeyAuth``'s, the card's API-key schemes')."""
    if allowed or not exposed(url, secure):
        return None
    if has_userinfo(url):
        raise refusal(url, "the URL's userinfo")
    return CredentialGuard(url, names)
