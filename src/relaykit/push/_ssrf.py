"""The SSRF guard for webhook URLs (digest §7.6): checked when a config is created and again at connect time.

Rules:

* the URL must be ``http`` or ``https`` with a host;
* loopback, private (RFC 1918, ULA), link-local, carrier-grade NAT (100.64/10), multicast, unspecified, reserved
  and other non-global addresses are refused, and so are cloud metadata endpoints (169.254.169.254,
  fd00:ec2::254, 100.100.100.200, …), also when they hide in an IPv4-mapped, NAT64, 6to4 or Teredo IPv6 address;
  ``localhost`` and ``*.localhost`` count as loopback without asking DNS;
* a hostname is resolved and every address it resolves to must pass (one bad address refuses the URL); a refusal
  names the host and the kind of address, never the address a name resolved to (callers must not learn the internal
  network from it: that goes to the log);
* ``allow`` (``create_app(push_allow=...)``, ``relaykit serve --push-allow``) opens hosts and networks: a hostname
  entry (``localhost``, ``hooks.internal``, ``*.corp.example``) allows that host whatever it resolves to, an IP or
  CIDR entry (``127.0.0.1``, ``10.0.0.0/8``, ``::1``) allows those addresses.

At config time a name that does not resolve is accepted (the receiver may not exist yet); the connect-time check
decides. A host that is no valid DNS name (an empty label, a label over 63 characters) is refused as an invalid URL
(it never resolves); at delivery it fails like a name that does not resolve.

Lookups go through ``_resolver``: each holds a place until the system resolver answers (the timeout ends the wait,
not the lookup), on a thread of its own, never the loop's default executor. Config-time checks have
``MAX_LOOKUPS`` places (a check whose lookup cannot start within the timeout is refused as retryable,
RESOURCE_EXHAUSTED), deliveries ``DELIVERY_LOOKUPS`` of their own (a delivery whose lookup cannot start is put off,
``_delivery``), so names whose DNS answers slowly hold a few threads at most and neither kind waits behind the other;
an authenticated owner's deliveries hold ``OWNER_LOOKUPS`` (2) of theirs at most, so one owner's slow names cannot
put off everyone's deliveries. An answer is kept ``DNS_TTL`` (30) seconds, a failure ``NEGATIVE_TTL`` (5), so many
deliveries to one host look it up once.

At connect time the name is resolved (or its kept answer taken), each address is checked, on every use, and the
connection goes to a checked address, while the request keeps the original ``Host`` header and TLS server name
(``GuardedBackend`` under httpx), so a DNS answer that changes between check and connect (rebinding) cannot reach a
refused address. A delivery resolves and checks its host before it takes its slots (``_delivery``: the slots are
keyed by the address) and hands those checked addresses to its connect (``connecting_to``): the connect looks
nothing up again (a second lookup could find no place, or another address than the slot's) and goes only to
addresses this guard checked.
"""

from __future__ import annotations

import asyncio
import contextvars
import ipaddress
import logging
import typing
from collections.abc import Iterable
from urllib.parse import urlsplit

import httpcore

from relaykit._errors import InvalidParamsError, ResourceExhaustedError
from relaykit.push._resolver import DNS_TTL, NEGATIVE_TTL, InvalidHostError, LookupBusyError, Resolver
from relaykit.push._slots import KeyedSlots

__all__ = [
    "GuardedBackend",
    "LookupBusyError",
    "WebhookGuard",
    "WebhookRefusedError",
    "address_problem",
    "connecting_to",
    "done_connecting",
]

log = logging.getLogger("relaykit.push")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

RESOLVE_TIMEOUT = 2.0  # seconds for the config-time DNS lookup (and as long again to wait for one to start)
MAX_LOOKUPS = 2  # config-time DNS lookups running at once (each holds a resolver thread until it answers)
LOOKUP_TIMEOUT = 5.0  # seconds for a delivery-time DNS lookup (and as long again to wait for one to start)
DELIVERY_LOOKUPS = 4  # delivery-time DNS lookups running at once (places of their own: see ``_resolver``)
OWNER_LOOKUPS = 2  # of those, for one authenticated owner's deliveries at most (``_resolver``)

# The checked addresses of the delivery in flight in this task: ``(host, port, addresses)``, set by ``_delivery``
# around one attempt (``connecting_to``), read by ``GuardedBackend.connect_tcp``. A context variable because httpx
# hands the backend nothing of the request but its host and port; httpcore connects in the requesting task.
_Checked = tuple[str, int, tuple[str, ...]]
_CONNECTING: contextvars.ContextVar[_Checked | None] = contextvars.ContextVar("relaykit_push_connecting", default=None)

# Cloud instance metadata services: named in the refusal, since they are the classic SSRF target.
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.169.253",  # AWS DNS
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::253",
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (classic)
    )
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


class WebhookRefusedError(ValueError):
    """A webhook URL the SSRF guard refuses; the message names the address and how to allow it."""

    def __init__(self, message: str, *, field_reason: str = "refused by the SSRF guard") -> None:
        super().__init__(message)
        self.field_reason = field_reason


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64 or ip in _NAT64_LOCAL:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_problem(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public unicast address (``"loopback"``, ``"private"``, …), or ``None`` if it is.

    >>> address_problem(ipaddress.ip_address("10.1.2.3"))
    'private'
    >>> address_problem(ipaddress.ip_address("93.184.215.14")) is None
    True
    """
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
        inner = _embedded_v4(ip)
        if inner is not None:
            problem = address_problem(inner)
            return f"{problem} (embedded in {ip})" if problem else None
    if ip in _METADATA:
        return "cloud metadata"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "carrier-grade NAT (shared)"
    if ip.is_private:
        return "private"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "non-global"
    return None


def _parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


class WebhookGuard:
    """Which webhook targets are allowed: public addresses, plus the ``allow`` list's hosts and networks.

    >>> guard = WebhookGuard(["127.0.0.1", "hooks.internal"])
    >>> guard.allows_address(ipaddress.ip_address("127.0.0.1")), guard.allows_host("hooks.internal")
    (True, True)
    """

    def __init__(
        self,
        allow: Iterable[str] = (),
        *,
        resolve_timeout: float = RESOLVE_TIMEOUT,
        max_lookups: int = MAX_LOOKUPS,
        lookup_timeout: float = LOOKUP_TIMEOUT,
        delivery_lookups: int = DELIVERY_LOOKUPS,
        owner_lookups: int = OWNER_LOOKUPS,
        dns_ttl: float = DNS_TTL,
        dns_negative_ttl: float = NEGATIVE_TTL,
    ) -> None:
        self.allow = tuple(allow)
        self.resolve_timeout = resolve_timeout
        self.max_lookups = max_lookups
        self.lookup_timeout = lookup_timeout
        self.resolver = Resolver(ttl=dns_ttl, negative_ttl=dns_negative_ttl)
        # The places of each kind of lookup (``_resolver``): released when a lookup's thread is done, not when its
        # caller stops waiting for it; and those of each authenticated owner's delivery lookups.
        self._lookups = asyncio.Semaphore(max_lookups)
        self._delivery_lookups = asyncio.Semaphore(delivery_lookups)
        self._owner_lookups = KeyedSlots(owner_lookups)
        self._networks: list[IPNetwork] = []
        self._hosts: set[str] = set()
        self._suffixes: list[str] = []
        for raw in self.allow:
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                self._networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            entry = entry.rstrip(".")
            if entry.startswith("*."):
                self._suffixes.append(entry[1:])
            else:
                self._hosts.add(entry)

    def allows_host(self, host: str) -> bool:
        """Whether the allow list names this host (exactly, or by a ``*.`` suffix)."""
        name = host.lower().rstrip(".")
        return name in self._hosts or any(name.endswith(suffix) for suffix in self._suffixes)

    def allows_address(self, ip: IPAddress) -> bool:
        """Whether ``ip`` may be reached: public, or inside an allowed network."""
        if any(ip.version == net.version and ip in net for net in self._networks):
            return True
        return address_problem(ip) is None

    def _refusal(self, url: str, host: str, ip: IPAddress | None, problem: str) -> WebhookRefusedError:
        # A name is reported by its name only: what an internal name resolves to is nobody's business but the
        # operator's (the log has it). An address the caller wrote itself is named as written.
        literal = ip is not None and str(ip) == host.strip("[]")
        if literal:
            what, suggest = f"{ip} is a {problem} address", str(ip)
        else:
            what, suggest = f"{host} resolves to a {problem} address", host
            log.info("webhook host %s refused: it resolves to %s (%s)", host, ip or "localhost", problem)
        return WebhookRefusedError(
            f"webhook URL {url} is refused: {what}, which push notifications may not reach "
            f"(SSRF guard). To allow it, pass --push-allow {suggest} to relaykit serve "
            f"(create_app(push_allow=[{suggest!r}]))",
            field_reason=f"{what} (SSRF guard; allow with --push-allow {suggest})",
        )

    def split(self, url: str) -> tuple[str, int]:
        """``(host, port)`` of a webhook URL, refusing non-HTTP(S) schemes and host-less URLs."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise WebhookRefusedError(
                f"webhook URL {url!r} is not a valid URL: {exc}", field_reason="invalid URL"
            ) from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise WebhookRefusedError(
                f"webhook URL {url!r} is refused: the scheme must be http or https (got {scheme or 'none'!r})",
                field_reason="the scheme must be http or https",
            )
        host = parts.hostname or ""
        if not host:
            raise WebhookRefusedError(f"webhook URL {url!r} has no host", field_reason="the URL has no host")
        return host, port or (443 if scheme == "https" else 80)

    async def check_url(self, url: str) -> None:
        """The config-time check; raises ``WebhookRefusedError``. A name that does not resolve passes. Raises
        ``ResourceExhaustedError`` (retryable) when its lookup cannot start in time (``MAX_LOOKUPS``)."""
        host, port = self.split(url)
        if self.allows_host(host):
            return
        ip = _parse_ip(host)
        if ip is not None:
            if not self.allows_address(ip):
                raise self._refusal(url, host, ip, address_problem(ip) or "refused")
            return
        try:
            addresses = await self._resolve(host, port)
        except InvalidHostError as exc:
            raise WebhookRefusedError(
                f"webhook URL {url!r} is not a valid URL: its host is {exc}", field_reason=f"the host is {exc}"
            ) from None
        except (OSError, TimeoutError):
            if _is_localhost(host):
                raise self._refusal(url, host, None, "loopback (localhost)") from None
            return
        for address in addresses:
            if not self.allows_address(address):
                raise self._refusal(url, host, address, address_problem(address) or "refused")

    async def check_config(self, url: str, field: str) -> None:
        """``check_url`` for a push config, raising ``InvalidParamsError`` (what the request handler calls)."""
        try:
            await self.check_url(url)
        except WebhookRefusedError as exc:
            raise InvalidParamsError(str(exc), field_violations=[(field, exc.field_reason)]) from None

    async def _resolve(self, host: str, port: int) -> tuple[IPAddress, ...]:
        try:
            return await self.resolver.resolve(host, port, self._lookups, self.resolve_timeout)
        except LookupBusyError:
            # Names nobody asked about are not named: the caller's own host is the only one in the log line.
            log.warning("webhook host %s not checked: %d lookups already in progress", host, self.max_lookups)
            raise ResourceExhaustedError(
                "the server cannot check the webhook host now: too many webhook host lookups are in progress; "
                "retry shortly",
                retry_after="1",
            ) from None

    async def connect_addresses(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        owner: str | None = None,
    ) -> list[str]:
        """The connect-time check: the checked addresses to connect to for ``host`` (raises ``ConnectError``, and
        ``LookupBusyError`` when its lookup cannot start: ``DELIVERY_LOOKUPS``, and ``OWNER_LOOKUPS`` of ``owner``'s
        when one is given: pass none for the anonymous owner). A kept answer (``DNS_TTL``) is checked like a fresh
        one."""
        ip = _parse_ip(host)
        addresses: typing.Sequence[IPAddress]
        if ip is not None:
            addresses = [ip]
        else:
            wait = min(timeout, self.lookup_timeout) if timeout else self.lookup_timeout
            places = (self._owner_lookups, owner) if owner is not None else None
            try:
                addresses = await self.resolver.resolve(host, port, self._delivery_lookups, wait, places)
            except LookupBusyError:
                raise
            except (OSError, TimeoutError) as exc:
                if _is_localhost(host) and not self.allows_host(host):
                    raise httpcore.ConnectError(
                        f"webhook host {host} is refused: a loopback (localhost) name (SSRF guard; --push-allow {host})"
                    ) from exc
                reason = f"no answer within {wait:g} s" if isinstance(exc, TimeoutError) else str(exc)
                raise httpcore.ConnectError(f"cannot resolve webhook host {host}: {reason}") from exc
        if not self.allows_host(host):
            for address in addresses:
                if not self.allows_address(address):
                    problem = address_problem(address) or "refused"
                    if ip is not None:
                        what, suggest = f"{address} is a {problem} address", str(address)
                    else:
                        # Delivery errors reach the config's owner (push status): never name the resolved address.
                        what, suggest = f"{host} resolves to a {problem} address", host
                        log.info("webhook host %s refused: it resolves to %s (%s)", host, address, problem)
                    raise httpcore.ConnectError(
                        f"webhook host {what} (SSRF guard; allow it with --push-allow {suggest})"
                    )
        if not addresses:
            raise httpcore.ConnectError(f"webhook host {host} resolved to no address")
        return [str(a) for a in addresses]


def connecting_to(host: str, port: int, addresses: Iterable[str]) -> contextvars.Token[_Checked | None]:
    """Until ``done_connecting(token)``: this task's connect to ``host:port`` goes to ``addresses`` (what
    ``connect_addresses`` returned: checked), in order, without another lookup."""
    return _CONNECTING.set((host.lower(), port, tuple(addresses)))


def done_connecting(token: contextvars.Token[_Checked | None]) -> None:
    """The end of ``connecting_to``'s hold."""
    _CONNECTING.reset(token)


def _is_localhost(host: str) -> bool:
    name = host.lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that connects only to addresses the guard checked.

    httpcore asks it for a TCP connection to the URL's host; it resolves the host once, checks every address and
    connects to a checked one (the next on failure). A delivery that resolved and checked the host already hands its
    addresses over (``connecting_to``): they are used as they are, with no second lookup. TLS then starts on that
    socket with the URL's host as server name, and the request carries the URL's ``Host``: nothing but the socket's
    peer changes.
    """

    def __init__(self, guard: WebhookGuard, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.guard = guard
        self.inner = inner if inner is not None else httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        checked = _CONNECTING.get()
        addresses: typing.Sequence[str]
        if checked is not None and checked[1] == port and checked[0] == host.lower():
            addresses = checked[2]
        else:
            addresses = await self.guard.connect_addresses(host, port, timeout)
        error: Exception | None = None
        for address in addresses:
            try:
                return await self.inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout, OSError) as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks are never delivered over unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)
