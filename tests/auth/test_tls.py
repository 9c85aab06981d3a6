"""TLS on the HTTP and the gRPC port, and mutual TLS as authentication, with a throwaway CA made by the test.

The client is given the CA bundle (and a client certificate) once and uses them on every binding. A certificate's
subject is the principal, the same on HTTP and gRPC. One from another CA never gets past the handshake; without one,
HTTP answers 401 (the card and health stay public) and gRPC's handshake refuses (Python gRPC cannot make it optional).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from auth.conftest import BINDINGS, Served, T, pem
from auth.whoami_agent import whoami
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from relaykit import Task
from relaykit.auth import Auth, MTLSAuthenticator
from relaykit.client import Client
from relaykit.errors import A2AError, AuthenticationRequiredError, TaskNotFoundError
from relaykit.grpc import server_credentials


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    alice: tuple[str, str]
    bob: tuple[str, str]
    stranger: tuple[str, str]  # signed by another CA


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, cn), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Test")]
    )


def _issue(
    subject: str, key: Any, issuer: tuple[x509.Name, Any] | None, *, ca: bool = False, server: bool = False
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer if issuer is not None else (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    from cryptography.hazmat.primitives.serialization import Encoding

    root = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _issue("Test CA", ca_key, None, ca=True)
    (root / "ca.pem").write_bytes(ca_cert.public_bytes(Encoding.PEM))

    def leaf(name: str, *, server: bool = False, by: tuple[x509.Name, Any] | None = None) -> tuple[str, str]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(name, key, by or (ca_cert.subject, ca_key), server=server)
        (root / f"{name}.crt").write_bytes(cert.public_bytes(Encoding.PEM))
        (root / f"{name}.key").write_bytes(pem(key))
        return str(root / f"{name}.crt"), str(root / f"{name}.key")

    other_key = ec.generate_private_key(ec.SECP256R1())
    other_ca = _issue("Other CA", other_key, None, ca=True)
    server_cert, server_key = leaf("server", server=True)
    return Pki(
        root / "ca.pem",
        Path(server_cert),
        Path(server_key),
        leaf("alice"),
        leaf("bob"),
        leaf("stranger", by=(other_ca.subject, other_key)),
    )


async def _serve(agent: Callable[..., Any], pki: Pki, *, mutual: bool) -> Served:
    options: dict[str, Any] = {"ssl_certfile": str(pki.server_cert), "ssl_keyfile": str(pki.server_key)}
    if mutual:
        options.update(ssl_ca_certs=str(pki.ca), ssl_cert_reqs=ssl.CERT_OPTIONAL)  # as relaykit serve sets it
    credentials = server_credentials(str(pki.server_cert), str(pki.server_key), str(pki.ca) if mutual else None)
    auth = Auth(MTLSAuthenticator()) if mutual else None
    return await agent(  # type: ignore[no-any-return]
        whoami, scheme="https", uvicorn_options=options, grpc_credentials=credentials, auth=auth
    )


@pytest.mark.parametrize("binding", BINDINGS)
async def test_https_and_grpc_over_tls(agent: Callable[..., Any], pki: Pki, binding: str) -> None:
    served = await _serve(agent, pki, mutual=False)
    async with asyncio.timeout(T):
        client = await served.client(binding, ca_certs=str(pki.ca))
        task = await client.send("over tls")
        assert isinstance(task, Task)
        assert task.artifacts[0].parts[0].text == "anonymous|over tls"
        # The card as a client got it before, so the call goes straight to the binding's port (gRPC's too).
        stranger = Client(served.url, card=client.card, transports=[binding], timeout=T)  # the system's CAs only
        await stranger.connect()  # nothing to fetch: the card is given
        with pytest.raises(A2AError):
            await stranger.send("who are you?")
        await stranger.aclose()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_client_certificates_are_the_principal(agent: Callable[..., Any], pki: Pki, binding: str) -> None:
    served = await _serve(agent, pki, mutual=True)
    async with asyncio.timeout(T):
        alice = await served.client(binding, ca_certs=str(pki.ca), client_cert=pki.alice)
        bob = await served.client(binding, ca_certs=str(pki.ca), client_cert=pki.bob)
        task = await alice.send("signed in")
        assert isinstance(task, Task)
        assert task.artifacts[0].parts[0].text == "mtls:O=Test,CN=alice|signed in"
        with pytest.raises(TaskNotFoundError):
            await bob.get_task(task.id)
        assert [t async for t in bob.list_tasks()] == []
        for cert in (None, pki.stranger):
            # One from another CA: the TLS handshake fails, nothing reaches the agent. None: no credential, 401 on
            # HTTP; on gRPC the handshake requires one.
            nobody = Client(
                served.url, card=alice.card, transports=[binding], timeout=T, ca_certs=str(pki.ca), client_cert=cert
            )
            await nobody.connect()
            refused = AuthenticationRequiredError if cert is None and binding != "GRPC" else A2AError
            with pytest.raises(refused):
                await nobody.send("let me in")
            await nobody.aclose()


async def test_relaykit_serve_with_tls_and_client_certificates(pki: Pki) -> None:
    import sys

    from support.servers import free_port

    port, grpc_port = free_port(), free_port()
    command = ["-m", "relaykit.cli", "serve", "tests/auth/whoami_agent.py:whoami", "--store", "memory"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--grpc-port", str(grpc_port), "--grace", "0.5"]
    command += ["--ssl-certfile", str(pki.server_cert), "--ssl-keyfile", str(pki.server_key)]
    command += ["--ssl-ca-certs", str(pki.ca), "--public-url", f"https://127.0.0.1:{port}"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(3 * T):
            # Ready when the banner is printed: the HTTPS port listens, and gRPC started before it.
            seen = ""
            while "agent card at" not in seen:
                line = (await proc.stdout.readline()).decode()
                assert line, f"relaykit serve exited: {seen}"
                seen += line
            assert f"on https://127.0.0.1:{port}" in seen
            # Without a client certificate: what is public answers, an operation gets 401 with a challenge.
            trusted = ssl.create_default_context(cafile=str(pki.ca))
            async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=trusted, timeout=T) as http:
                for path in ("/.well-known/agent-card.json", "/healthz", "/readyz"):
                    assert (await http.get(path)).status_code == 200, path
                send = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
                refused = await http.post("/message:send", json=send, headers={"A2A-Version": "1.0"})
                assert refused.status_code == 401
                assert refused.headers["www-authenticate"] == 'mTLS realm="a2a"'
            for binding in BINDINGS:
                client = Client(
                    f"https://127.0.0.1:{port}",
                    transports=[binding],
                    timeout=T,
                    ca_certs=str(pki.ca),
                    client_cert=pki.bob,
                )
                async with client:
                    task = await client.send("from the command line")
                assert isinstance(task, Task)
                assert task.artifacts[0].parts[0].text == "mtls:O=Test,CN=bob|from the command line"
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), T)


async def test_client_commands_take_the_ca_and_a_client_certificate(
    agent: Callable[..., Any], pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    """``relaykit send/get/card … --ca --cert --key``: the same TLS files for every binding the CLI client uses."""
    from relaykit.cli import main

    served = await _serve(agent, pki, mutual=True)
    cert, key = pki.alice
    tls = ["--ca", str(pki.ca), "--cert", cert, "--key", key]

    async def run(*argv: str) -> tuple[int, str, str]:
        # In a thread: the command runs its own event loop, the agent keeps serving in this one.
        code = await asyncio.wait_for(asyncio.to_thread(main, list(argv)), T)
        out, err = capsys.readouterr()
        return code, out, err

    for transport in ("jsonrpc", "rest", "grpc"):
        code, out, err = await run("send", served.url, "over mtls", "--transport", transport, "--json", *tls)
        assert code == 0, err
        task = json.loads(out)["task"]
        assert task["artifacts"][0]["parts"][0]["text"] == "mtls:O=Test,CN=alice|over mtls"
        code, out, err = await run("get", served.url, task["id"], "--transport", transport, "--json", *tls)
        assert code == 0, err
        assert json.loads(out)["id"] == task["id"]
    code, out, err = await run("card", served.url, "--json", *tls)
    assert code == 0, err
    assert json.loads(out)["name"] == "whoami"
    # Without the client certificate: refused, an A2A error (exit 1) saying what to present over HTTP, unreachable
    # (exit 3) over gRPC, whose handshake requires it; a key without its certificate is a usage error (exit 2)
    # before anything is sent.
    code, _, err = await run("send", served.url, "no cert", "--ca", str(pki.ca))
    assert code == 1, err
    assert "present a client certificate [UNAUTHENTICATED]" in err
    code, _, err = await run("send", served.url, "no cert", "--transport", "grpc", "--ca", str(pki.ca))
    assert code == 3, err
    code, _, err = await run("send", served.url, "half", "--ca", str(pki.ca), "--key", key)
    assert code == 2
    assert "--key needs --cert" in err
