"""relaykit's Client and CLI against an agent on the official a2a-sdk 0.3.26 (``sdk03_server.py``, run in the SDK's
own environment), on each binding it offers: JSON-RPC, HTTP+JSON and gRPC; and the Client against the same agent on
@a2a-js/sdk 0.3.14 (``js/sdk03_server.mjs``, node; ``support.jssdk``) on the same three (its gRPC service from its
``server/grpc`` entry point on @grpc/grpc-js).

The client reads the 0.3 card, picks the 0.3 interface of the binding it is told to use, and the caller sees the
1.0 models: send (task and bare message), get, stream, multi-turn input-required, cancel, subscribe (resubscribe;
the SDK numbers no events, so resuming relies on de-duplication), push config set/get (and list/delete where the
SDK serves them), errors as the 1.0 error classes, and file names and part metadata both ways.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.servers import ServerProcess, free_port, start_process, stop_process

from relaykit import Message, Part, Role, Task, TaskState
from relaykit.client import Client, ResumePolicy
from relaykit.errors import TaskNotCancelableError, TaskNotFoundError

pytestmark = pytest.mark.interop

SERVER = Path(__file__).with_name("sdk03_server.py")
JS_SERVER = Path(__file__).parent / "js" / "sdk03_server.mjs"
NODE = shutil.which("node") or "node"
STEP = 20.0
REPO = Path(__file__).resolve().parents[2]


# (agent, binding): every binding each 0.3 SDK's test server offers.
CASES = [(agent, binding) for agent in ("sdk", "js") for binding in ("JSONRPC", "HTTP+JSON", "GRPC")]


@pytest.fixture(scope="module")
def agent_sdk(sdk03: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The a2a-sdk 0.3.26 agent (``sdk03_server.py``): JSON-RPC, HTTP+JSON and gRPC."""
    grpc_port = free_port()

    def command(port: int) -> list[str]:
        return [str(sdk03), str(SERVER), "--port", str(port), "--grpc-port", str(grpc_port)]

    server = start_process(
        command, tmp_path_factory.mktemp("sdk03-agent"), name="sdk03-agent", ready_path="/.well-known/agent-card.json"
    )
    yield server
    stop_process(server.proc)


@pytest.fixture(scope="module")
def agent_js(js_sdk03: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The @a2a-js/sdk 0.3 agent (``js/sdk03_server.mjs``, same behaviour): JSON-RPC, HTTP+JSON and gRPC."""
    grpc_port = free_port()
    server = start_process(
        lambda port: [NODE, str(JS_SERVER), str(port), str(grpc_port)],
        tmp_path_factory.mktemp("js03-agent"),
        name="js03-agent",
        env={"A2A_JS_SDK03_DIR": str(js_sdk03)},
        ready_path="/.well-known/agent-card.json",
    )
    yield server
    stop_process(server.proc)


CASE_IDS = [f"{agent}-{binding.lower().replace('http+json', 'rest')}" for agent, binding in CASES]


@pytest.fixture(params=CASES, ids=CASE_IDS)
def case(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def sdk03_agent(case: tuple[str, str], request: pytest.FixtureRequest) -> ServerProcess:
    server: ServerProcess = request.getfixturevalue(f"agent_{case[0]}")
    return server


@pytest.fixture
def binding(case: tuple[str, str]) -> str:
    return case[1]


async def test_card_picks_the_03_interface(sdk03_agent: ServerProcess, binding: str) -> None:
    async with Client(sdk03_agent.url, transports=[binding], timeout=STEP) as client:
        assert client.interface is not None
        assert client.interface.protocol_binding == binding
        assert client.interface.protocol_version == "0.3.0"
        assert getattr(client.transport, "v03", False) is True


async def test_send_get_and_message(sdk03_agent: ServerProcess, binding: str) -> None:
    async with Client(sdk03_agent.url, transports=[binding], timeout=STEP) as client, asyncio.timeout(STEP):
        task = await client.send("hello")
        assert isinstance(task, Task)
        assert task.status.state is TaskState.COMPLETED
        assert task.artifacts[0].text_content == "hello"
        fetched = await client.get_task(task.id)
        assert fetched.id == task.id
        assert fetched.artifacts[0].text_content == "hello"
        reply = await client.send("message hi")
        assert isinstance(reply, Message)
        assert reply.text == "you said: hi"


async def test_stream(sdk03_agent: ServerProcess, binding: str) -> None:
    async with Client(sdk03_agent.url, transports=[binding], timeout=STEP) as client, asyncio.timeout(STEP):
        chunks: list[str] = []
        last = None
        async for event in client.stream("stream 4"):
            last = event
            artifact = getattr(event, "artifact", None)
            if artifact is not None:
                chunks.append(artifact.text_content)
        assert chunks == [f"chunk {i}" for i in range(4)]
        assert last is not None
        assert last.status.state is TaskState.COMPLETED  # type: ignore[union-attr]


async def test_multi_turn(sdk03_agent: ServerProcess, binding: str) -> None:
    async with (
        Client(sdk03_agent.url, transports=[binding], timeout=STEP, on_input_required=lambda task: "Ada") as client,
        asyncio.timeout(STEP),
    ):
        assert await client.ask("ask me") == "got: Ada"


async def test_cancel_and_errors(sdk03_agent: ServerProcess, binding: str) -> None:
    async with Client(sdk03_agent.url, transports=[binding], timeout=STEP) as client, asyncio.timeout(STEP):
        running = await client.send("slow 100", return_immediately=True)
        assert isinstance(running, Task)
        canceled = await client.cancel(running.id)
        assert canceled.status.state is TaskState.CANCELED
        with pytest.raises(TaskNotFoundError):
            await client.get_task("no-such-task")
        with pytest.raises(TaskNotCancelableError):  # on gRPC, each SDK's own way of naming it (grpc03.error_in)
            await client.cancel(running.id)


async def test_subscribe(sdk03_agent: ServerProcess, binding: str) -> None:
    async with Client(sdk03_agent.url, transports=[binding], timeout=STEP) as client, asyncio.timeout(STEP):
        running = await client.send("slow 5", return_immediately=True)
        assert isinstance(running, Task)
        texts: list[str] = []
        final = None
        async for event in client.subscribe(running.id):
            final = event
            artifact = getattr(event, "artifact", None)
            if artifact is not None:
                texts.append(artifact.text_content)
        assert final is not None
        assert final.status.state is TaskState.COMPLETED  # type: ignore[union-attr]
        assert texts == sorted(set(texts), key=texts.index)  # each chunk once


async def test_subscription_ends_with_a_cancel(sdk03_agent: ServerProcess, binding: str) -> None:
    # a2a-sdk 0.3's HTTP+JSON stream of a task canceled meanwhile closes without its last event, and resubscribing
    # gets a broken stream: the client reads the task's state instead of retrying until it gives up.
    policy = ResumePolicy(attempts=5, backoff=0.05, max_backoff=0.2)
    async with (
        Client(sdk03_agent.url, transports=[binding], timeout=STEP, resume=policy) as client,
        asyncio.timeout(STEP),
    ):
        running = await client.send("slow 100", return_immediately=True)
        assert isinstance(running, Task)
        events = []
        async for event in client.subscribe(running.id):
            events.append(event)
            if len(events) == 2:
                assert (await client.cancel(running.id)).status.state is TaskState.CANCELED
        final = events[-1]
        state = final.status.state  # type: ignore[union-attr]
        assert state is TaskState.CANCELED


async def test_push_config(sdk03_agent: ServerProcess, binding: str) -> None:
    async with Client(sdk03_agent.url, transports=[binding], timeout=STEP) as client, asyncio.timeout(STEP):
        task = await client.send("slow 20", return_immediately=True)
        assert isinstance(task, Task)
        created = await client.create_push_config(task.id, "https://hooks.example.com/a2a", token="t1", config_id="c1")
        assert (created.task_id, created.url, created.token) == (task.id, "https://hooks.example.com/a2a", "t1")
        got = await client.get_push_config(task.id, "c1")
        assert got.url == "https://hooks.example.com/a2a"
        if binding == "JSONRPC" or "js" in sdk03_agent.name:  # a2a-sdk serves list/delete on JSON-RPC only
            assert [c.id for c in await client.list_push_configs(task.id)] == ["c1"]
            await client.delete_push_config(task.id, "c1")
            assert await client.list_push_configs(task.id) == []
        await client.cancel(task.id)


def test_cli_send_and_get(agent_sdk: ServerProcess) -> None:
    sdk03_agent = agent_sdk

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "relaykit.cli", *args], capture_output=True, text=True, timeout=60, cwd=REPO
        )

    sent = cli("send", "--json", sdk03_agent.url, "hello from the cli")
    assert sent.returncode == 0, sent.stderr
    assert "hello from the cli" in sent.stdout
    card = cli("card", sdk03_agent.url)
    assert card.returncode == 0, card.stderr
    assert "0.3" in card.stdout
    missing = cli("get", sdk03_agent.url, "no-such-task")
    assert missing.returncode == 1
    assert "not found" in missing.stderr.lower()


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON", "GRPC"], ids=["jsonrpc", "rest", "grpc"])
async def test_file_names_and_part_metadata_travel(agent_sdk: ServerProcess, binding: str) -> None:
    """A file part's name and a part's metadata reach a2a-sdk's agent and come back in the task's history, on every
    binding (the 0.3 JSON schema has both, the v0.3.0 proto neither; a2a-sdk's proto and relaykit's carry them).
    (The @a2a-js/sdk test agent keeps no history to read them back from.)"""
    sdk03_agent = agent_sdk
    parts = [
        Part(text="files", metadata={"pm": "text"}),
        Part(raw=b"abc", media_type="text/plain", filename="notes.txt", metadata={"pm": "bytes"}),
        Part.from_url("https://files.example.com/a.txt", filename="a.txt"),
    ]
    async with Client(sdk03_agent.url, transports=[binding], timeout=STEP) as client, asyncio.timeout(STEP):
        task = await client.send(parts)
        assert isinstance(task, Task)
        fetched = await client.get_task(task.id)
    sent = next(m for m in fetched.history if m.role is Role.USER)
    assert [(p.filename, p.metadata) for p in sent.parts] == [
        ("", {"pm": "text"}),
        ("notes.txt", {"pm": "bytes"}),
        ("a.txt", None),
    ]
    assert sent.parts[1].raw == b"abc"
