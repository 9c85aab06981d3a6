"""The resume test: a 500-chunk stream whose connection is cut three times mid-stream reaches the application with
every chunk exactly once and in order; a server that stays down ends in ``A2AReconnectError``.

The agent (``_agents.py:kitchen``, text ``stream 500 3``) streams 500 chunks of one artifact, 3 ms apart, and is
served with ``relaykit serve --public-url <proxy>``, so the card the client resolves (through the proxy) sends every
request through ``CutProxy``. The test cuts at three points chosen by the chunks the proxy has forwarded, not by
how far the client has read (a client running behind on a loaded machine may already hold the rest of the stream in
its socket buffer): at the end of chunk 120's frame (between frames, RST), and twice a few bytes past a chunk (so the
cut lands inside an SSE frame). relaykit numbers its events, so each resume is a SubscribeToTask with
``Last-Event-ID``; a2a-sdk 1.3.0 does not, so there the client rebuilds the missing chunks from the Task snapshot and
drops the repeats that follow it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from support.servers import ServerProcess, free_port, start_serve

from client._net import CutProxy
from client._procs import start_sdk
from relaykit import Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent
from relaykit.client import Client, ResumePolicy
from relaykit.client._client import Event
from relaykit.errors import A2AReconnectError

AGENTS = "tests/client/_agents.py"
N = 500
PROMPT = "stream 500 3"  # 500 chunks, 3 ms apart
T = 30.0
FAST_RESUME = ResumePolicy(attempts=5, backoff=0.01, max_backoff=0.05)


@pytest.fixture(scope="module")
def proxy_ports() -> dict[str, int]:
    """A proxy port per server kind, fixed for the module (the servers' cards name it)."""
    return {"relaykit": free_port(), "a2a-sdk": free_port()}


@pytest.fixture(scope="module")
def resume_servers(
    proxy_ports: dict[str, int], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServerProcess]]:
    logs = tmp_path_factory.mktemp("resume-servers")
    started: dict[str, ServerProcess] = {}
    try:
        started["relaykit"] = start_serve(
            f"{AGENTS}:kitchen", logs, public_url=f"http://127.0.0.1:{proxy_ports['relaykit']}"
        )
        started["a2a-sdk"] = start_sdk(logs, public_url=f"http://127.0.0.1:{proxy_ports['a2a-sdk']}")
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(params=["relaykit", "a2a-sdk"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def proxy(
    kind: str, proxy_ports: dict[str, int], resume_servers: dict[str, ServerProcess]
) -> AsyncIterator[CutProxy]:
    p = await CutProxy(resume_servers[kind].port).start(proxy_ports[kind])
    try:
        yield p
    finally:
        await p.aclose()


async def _consume(client: Client, on_chunk: Callable[[int], None]) -> tuple[list[str], list[Event]]:
    texts: list[str] = []
    events: list[Event] = []
    async for event in client.stream(PROMPT):
        events.append(event)
        if isinstance(event, TaskArtifactUpdateEvent):
            for part in event.artifact.parts:
                assert part.text is not None
                texts.append(part.text)
                on_chunk(int(part.text.split()[1]))
    return texts, events


def _resumes(proxy: CutProxy) -> int:
    sent = bytes(proxy.sent)
    return len(re.findall(rb'"method":"SubscribeToTask"|:subscribe HTTP/1.1', sent))


async def test_resume_after_three_cuts(kind: str, proxy: CutProxy, binding: str) -> None:
    # An SSE frame ends at an empty line ("\n\n", or "\r\n\r\n" from sse-starlette); a frame's data is one line.
    proxy.cut_when(rb'chunk 120"[^\n]*\n\r?\n')  # between frames
    proxy.cut_when(rb'chunk 260"', after=37)  # inside that frame
    proxy.cut_when(rb'chunk 410"', after=1500)  # a few frames later, mid-frame

    async with asyncio.timeout(T):
        async with Client(proxy.url, transports=[binding], resume=FAST_RESUME) as client:
            assert client.interface is not None
            assert client.interface.url.startswith(proxy.url)
            texts, events = await _consume(client, lambda index: None)

    assert proxy.cuts == 3, f"{proxy.cuts} cuts made, {proxy.accepted} connections accepted"
    assert _resumes(proxy) == 3
    assert texts == [f"chunk {i}" for i in range(N)]
    assert isinstance(events[0], Task)
    last = events[-1]
    assert isinstance(last, TaskStatusUpdateEvent)
    assert last.status.state is TaskState.COMPLETED
    terminal = [e for e in events if isinstance(e, TaskStatusUpdateEvent) and e.status.state.is_terminal]
    assert terminal == [last]
    if kind == "relaykit":
        # Every resume named the last event the client had: exact replay, no snapshot needed.
        assert len(re.findall(rb"(?i)last-event-id: \d+", bytes(proxy.sent))) == 3


async def test_proxy_refuses_ends_in_reconnect_error(kind: str, proxy: CutProxy, binding: str) -> None:
    policy = ResumePolicy(attempts=3, backoff=0.01, max_backoff=0.02)
    received: list[int] = []
    refused_at: list[int] = []

    def on_chunk(index: int) -> None:
        received.append(index)
        if index == 50:
            proxy.refuse = True  # every reconnection is accepted and reset at once
            refused_at.append(proxy.accepted)
            proxy.cut()

    async with asyncio.timeout(T):
        async with Client(proxy.url, transports=[binding], resume=policy) as client:
            with pytest.raises(A2AReconnectError) as info:
                await _consume(client, on_chunk)
    assert info.value.attempts == 3
    assert received == list(range(len(received)))
    assert received[-1] >= 50
    # One connection per reconnection attempt, and after the first failed one a check of the task's state (GetTask,
    # with its own retries), then it gave up.
    assert proxy.accepted - refused_at[0] == 3 + client.retry.attempts
    assert _resumes(proxy) == 0  # none got through


async def test_server_killed_ends_in_reconnect_error(binding: str, tmp_path: Path) -> None:
    """The server process dies (SIGKILL) mid-stream and never comes back."""
    proxy = await CutProxy().start()
    server = await asyncio.to_thread(start_serve, f"{AGENTS}:kitchen", tmp_path, public_url=proxy.url)
    proxy.upstream_port = server.port
    policy = ResumePolicy(attempts=4, backoff=0.01, max_backoff=0.02)
    received: list[int] = []

    def on_chunk(index: int) -> None:
        received.append(index)
        if index == 30:
            server.proc.kill()

    try:
        async with asyncio.timeout(T):
            async with Client(proxy.url, transports=[binding], resume=policy) as client:
                with pytest.raises(A2AReconnectError) as info:
                    await _consume(client, on_chunk)
    finally:
        await proxy.aclose()
        await asyncio.to_thread(server.stop)
    assert info.value.attempts == 4
    assert received == list(range(len(received)))
    assert "could not be resumed after 4 attempts" in str(info.value)


@pytest.mark.parametrize("kind", ["relaykit"])
async def test_quiet_stream_outlives_the_unary_timeout(kind: str, proxy: CutProxy, binding: str) -> None:
    """Streams have their own (default: no) read timeout: 0.6 s between chunks with a 0.25 s unary timeout."""
    async with asyncio.timeout(T):
        async with Client(proxy.url, transports=[binding]) as resolver:
            card = resolver.card  # resolved with the default timeout: only the stream meets the short one
        async with Client(card=card, transports=[binding], timeout=0.25, resume=FAST_RESUME) as client:
            events = [e async for e in client.stream("stream 2 600")]
    texts = [p.text for e in events if isinstance(e, TaskArtifactUpdateEvent) for p in e.artifact.parts]
    assert texts == ["chunk 0", "chunk 1"]
    assert _resumes(proxy) == 0  # no read timeout broke the stream
