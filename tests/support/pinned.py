"""relaykit's client pinned to one interface of a dual-stack server: a binding and a protocol version, whatever the
card would pick (it picks 1.0), so a test can speak 0.3 or 1.0 on purpose to one given replica."""

from __future__ import annotations

from relaykit._card import AgentInterface
from relaykit.client import Client


def pinned_client(url: str, binding: str, version: str, *, grpc_address: str = "", timeout: float = 20.0) -> Client:
    """A client of the server at ``url`` (``http://host:port``) speaking ``version`` on ``binding``
    (``JSONRPC``, ``HTTP+JSON`` or ``GRPC``, the latter at ``grpc_address``)."""
    target = {"JSONRPC": url + "/", "HTTP+JSON": url, "GRPC": grpc_address}[binding]
    interface = AgentInterface(url=target, protocol_binding=binding, protocol_version=version)
    client = Client(url, timeout=timeout)
    client.interface = interface
    client._transport = client._make_transport(interface)  # the card would pick 1.0: force the version under test
    return client
