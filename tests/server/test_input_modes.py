"""Media types a message's parts may have (``server._modes``): what an agent's card declares is what it accepts.

* The matcher's rules, as plain functions: case, parameters, wildcards, 0.3's bare tokens, the union of the card's
  defaults and every skill's modes, and no matcher at all (no check) when nothing is declared or everything is.
  What counts as declared: only the public card starts the check (an extended card's modes add to it), and a card
  read from JSON that says exactly ``["text/plain"]`` (every served card's JSON does) declares nothing.
* On the wire: two ``relaykit serve`` processes with gRPC (``_modes_agents.py``), spoken to by relaykit's client
  pinned to each binding (JSON-RPC, HTTP+JSON, gRPC) and each version (1.0, 0.3). A part the agent does not accept is
  refused with ``ContentTypeNotSupportedError`` naming its index and media type, on SendMessage and
  SendStreamingMessage, for a new task and a follow-up, and nothing is stored (no task made, the task unchanged);
  wildcards and parameters are accepted; an agent that declares no modes accepts anything. The raw answers carry the
  error table's codes: JSON-RPC -32005, REST 400 / 415 (0.3) with ErrorInfo ``CONTENT_TYPE_NOT_SUPPORTED``, gRPC
  INVALID_ARGUMENT.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Iterator

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2, status_pb2
from support.pinned import pinned_client
from support.servers import ServerPool, ServerProcess, start_serve

from relaykit import agent
from relaykit._grpc_gen import a2a_pb2 as pb
from relaykit.assembly import build_card
from relaykit.client import Client
from relaykit.errors import ContentTypeNotSupportedError
from relaykit.grpc import SERVICE_NAME
from relaykit.server import TaskEngine
from relaykit.server._handler import RequestHandler
from relaykit.server._modes import InputModes
from relaykit.types import AgentCard, AgentSkill, Part, Task, TaskState

AGENTS = "tests/server/_modes_agents.py"
T = 20.0
REASON = "CONTENT_TYPE_NOT_SUPPORTED"
ROUTES = [(b, v) for v in ("1.0", "0.3") for b in ("JSONRPC", "HTTP+JSON", "GRPC")]
ROUTE_IDS = [f"{b.lower().replace('http+json', 'rest')}-{v}" for b, v in ROUTES]


# --- the matcher -------------------------------------------------------------------------------------------------


def _modes(*declared_modes: str) -> InputModes:
    modes = InputModes.of(AgentCard(name="a", default_input_modes=list(declared_modes)))
    assert modes is not None
    return modes


@pytest.mark.parametrize(
    ("declared_modes", "part", "accepted"),
    [
        (["application/json"], Part(data={"k": 1}, media_type="application/json; charset=utf-8"), True),
        (["Application/JSON"], Part(raw=b"{}", media_type="application/json"), True),
        (["application/json;charset=utf-8"], Part(raw=b"{}", media_type="APPLICATION/JSON"), True),
        (["application/json"], Part(raw=b"{}", media_type="application/ld+json"), False),
        (["image/*"], Part(url="https://x/a.png", media_type="image/png"), True),
        (["image/*"], Part(url="https://x/a.pdf", media_type="application/pdf"), False),
        (["text/plain"], Part(text="hi"), True),  # no mediaType: never refused
        (["text/plain"], Part(text="# hi", media_type="text/markdown"), False),
        (["text"], Part(text="# hi", media_type="text/markdown"), True),  # 0.3 token: text parts and text/*
        (["text"], Part(text="{}", media_type="application/json"), True),
        (["text"], Part(raw=b"a,b", media_type="text/csv"), True),
        (["text"], Part(raw=b"%PDF", media_type="application/pdf"), False),
        (["file"], Part(raw=b"%PDF", media_type="application/pdf"), True),  # 0.3 token: any file part
        (["file"], Part(url="https://x/a.png", media_type="image/png"), True),
        (["file"], Part(data={}, media_type="application/json"), False),
        (["data"], Part(data=[1, 2], media_type="application/json"), True),  # 0.3 token: any data part
        (["data"], Part(raw=b"{}", media_type="application/json"), False),
        (["image"], Part(raw=b"x", media_type="image/webp"), True),  # other bare words: the top-level type
    ],
)
def test_matching(declared_modes: list[str], part: Part, accepted: bool) -> None:
    assert _modes(*declared_modes).accepts(part) is accepted


def test_a_card_that_declares_nothing_is_not_checked() -> None:
    """The default card says text/plain (the field is REQUIRED), but an agent that never declared modes keeps
    accepting everything: that default must not start refusing images sent to existing agents."""
    card = AgentCard(name="a", skills=[AgentSkill(id="s", name="s")])
    assert card.default_input_modes == ["text/plain"]
    assert InputModes.of(card) is None
    assert InputModes.of(card.model_copy(update={"name": "b"})) is None


@pytest.mark.parametrize("declared_modes", [[], [" "], ["*/*"], ["text/plain", "*/*; q=0.1"], ["*"]])
def test_no_modes_or_every_mode_means_no_check(declared_modes: list[str]) -> None:
    assert InputModes.of(AgentCard(name="a", default_input_modes=declared_modes)) is None


def test_accepted_is_the_union_of_the_defaults_and_every_skill() -> None:
    skills = [
        AgentSkill(id="a", name="a", input_modes=["image/png"]),
        AgentSkill(id="b", name="b", input_modes=["audio/*"]),
    ]
    # Skills alone declare modes: the card's defaultInputModes (text/plain, as served) join them.
    card = AgentCard(name="a", skills=skills)
    modes = InputModes.of(card)
    assert modes is not None
    assert InputModes.of(card.model_copy(update={"version": "2"})) is not None  # build_card / signing copy it
    for media_type, accepted in [("text/plain", True), ("image/png", True), ("audio/ogg", True), ("image/gif", False)]:
        assert modes.accepts(Part(raw=b"x", media_type=media_type)) is accepted, media_type


def test_a_fixed_extended_card_adds_its_modes() -> None:
    public = AgentCard(name="a", default_input_modes=["text/plain"])
    extended = AgentCard(name="a", skills=[AgentSkill(id="x", name="x", input_modes=["application/pdf"])])

    @agent
    async def echo(context: object) -> str:
        return "ok"

    engine = TaskEngine(echo)
    pdf = Part(raw=b"%PDF", media_type="application/pdf")
    alone = RequestHandler(engine, public).input_modes
    both = RequestHandler(engine, public, extended_card=extended).input_modes
    assert alone is not None
    assert both is not None
    assert not alone.accepts(pdf)
    assert both.accepts(pdf)
    assert RequestHandler(engine, AgentCard(name="a")).input_modes is None


def _echo_engine() -> TaskEngine:
    @agent
    async def echo(context: object) -> str:
        return "ok"

    return TaskEngine(echo)


def _served_json(card: AgentCard) -> str:
    """``card`` as ``relaykit serve`` serves it: what an author copies into a card file."""
    return build_card(_echo_engine().executor, card, public_url="http://127.0.0.1:8000").to_json().decode()


def test_an_extended_card_copied_from_the_served_card_turns_no_check_on() -> None:
    """``relaykit serve --extended-card card.json`` with a card copied from the served one (whose JSON always says
    ``defaultInputModes: ["text/plain"]``): images, PDFs and JSON data parts are still accepted from every caller.
    Nor does an extended card that declares modes start the check by itself: the public card says what is checked."""
    served = json.loads(_served_json(AgentCard(name="a", skills=[AgentSkill(id="s", name="s")])))
    assert served["defaultInputModes"] == ["text/plain"]
    copied = AgentCard.model_validate({**served, "name": "a (extended)"})  # as --extended-card reads its file
    widening = AgentCard.model_validate({**served, "defaultInputModes": ["text/plain", "application/pdf"]})
    engine = _echo_engine()
    public = AgentCard(name="a")
    assert RequestHandler(engine, public, extended_card=copied).input_modes is None
    assert RequestHandler(engine, public, extended_card=widening).input_modes is None
    # Behind a public card that declares its modes, the extended card's add to them.
    declared = AgentCard(name="a", default_input_modes=["text/plain", "image/*"])
    both = RequestHandler(engine, declared, extended_card=widening).input_modes
    assert both is not None
    assert both.accepts(Part(raw=b"%PDF", media_type="application/pdf"))
    assert not both.accepts(Part(raw=b"x", media_type="audio/ogg"))


def test_a_public_card_read_from_json_with_the_default_turns_no_check_on() -> None:
    """A public card read from JSON (a file, a copy of a served card) that says exactly ``["text/plain"]`` says
    nothing (every card's JSON has the field); any other value read from JSON is a declaration, and so is any value
    given in code, ``["text/plain"]`` included. The card is served as it was."""
    text = _served_json(AgentCard(name="a"))
    read = AgentCard.from_json(text)
    assert read.default_input_modes == ["text/plain"]
    assert json.loads(read.to_json())["defaultInputModes"] == ["text/plain"]  # unchanged on the wire
    assert InputModes.of(read) is None
    assert RequestHandler(_echo_engine(), read).input_modes is None
    declared = AgentCard.from_json(_served_json(AgentCard(name="a", default_input_modes=["text/plain", "image/png"])))
    assert InputModes.of(declared) is not None
    in_code = InputModes.of(AgentCard(name="a", default_input_modes=["text/plain"]))
    assert in_code is not None
    assert not in_code.accepts(Part(raw=b"x", media_type="image/png"))
    snake = AgentCard.model_validate({"name": "a", "default_input_modes": ["text/plain"]})  # Python's spelling
    assert InputModes.of(snake) is not None


def test_the_error_names_the_part_and_stays_short() -> None:
    modes = _modes(*(f"application/x-{n}" for n in range(50)))
    parts = [
        Part(text="hi"),
        Part(raw=b"x", media_type="application/x-3"),
        Part(url="u", media_type="z/" + "y" * 10_000),
    ]
    with pytest.raises(ContentTypeNotSupportedError) as caught:
        modes.check(parts)
    error = caught.value
    assert str(error).startswith("message.parts[2]: media type z/yyy")
    assert "(accepted: application/x-0, application/x-1," in str(error)
    assert "and 42 more)" in str(error)
    assert len(str(error)) < 400
    assert error.field_violations == [("message.parts[2].mediaType", "not accepted by this agent")]
    assert error.reason == REASON
    assert error.code == -32005


# --- on the wire -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    with ServerPool(tmp_path_factory.mktemp("modes-servers")) as servers:
        yield servers


@pytest.fixture(scope="module")
def modes_server(pool: ServerPool) -> ServerProcess:
    return pool.get("declared", lambda d: start_serve(f"{AGENTS}:declared", d, grpc=True))


@pytest.fixture(scope="module")
def open_server(pool: ServerPool) -> ServerProcess:
    return pool.get("undeclared", lambda d: start_serve(f"{AGENTS}:undeclared", d, grpc=True))


def _client(server: ServerProcess, binding: str, version: str) -> Client:
    return pinned_client(server.url, binding, version, grpc_address=server.grpc_address, timeout=T)


def _refused_parts() -> list[Part]:
    return [
        Part(text="hi"),
        Part(raw=b"{}", media_type="application/json; charset=utf-8"),
        Part(raw=b"%PDF-1.7", media_type="application/pdf", filename="a.pdf"),
    ]


def _accepted_parts() -> list[Part]:
    return [
        Part(text="look"),
        Part(data={"k": 1}, media_type="application/json"),
        Part(raw=b"{}", media_type="application/json; charset=utf-8"),  # parameters ignored
        Part(raw=b"\x89PNG", media_type="image/png", filename="a.png"),  # the skill's image/*
        Part(url="https://example.com/b.jpg", media_type="IMAGE/JPEG"),  # case ignored
    ]


def _assert_refused(error: ContentTypeNotSupportedError) -> None:
    assert "message.parts[2]: media type application/pdf is not accepted by this agent" in str(error), str(error)
    assert "(accepted: text/plain, application/json, image/*)" in str(error)
    assert error.reason == REASON


async def _tasks_in(server: ServerProcess, context_id: str) -> list[Task]:
    async with Client(server.url, transports=["JSONRPC"], timeout=T) as reader:
        return [task async for task in reader.list_tasks(context_id=context_id)]


@pytest.mark.parametrize(("binding", "version"), ROUTES, ids=ROUTE_IDS)
async def test_a_part_the_agent_does_not_accept_is_refused(
    modes_server: ServerProcess, binding: str, version: str
) -> None:
    context_id = str(uuid.uuid4())
    client = _client(modes_server, binding, version)
    try:
        async with asyncio.timeout(T):
            with pytest.raises(ContentTypeNotSupportedError) as sent:
                await client.send(_refused_parts(), context_id=context_id)
            _assert_refused(sent.value)
            with pytest.raises(ContentTypeNotSupportedError) as streamed:
                [event async for event in client.stream(_refused_parts(), context_id=context_id)]
            _assert_refused(streamed.value)
            assert await _tasks_in(modes_server, context_id) == []  # nothing was stored
    finally:
        await client.aclose()


@pytest.mark.parametrize(("binding", "version"), ROUTES, ids=ROUTE_IDS)
async def test_wildcards_parameters_and_case_are_accepted(
    modes_server: ServerProcess, binding: str, version: str
) -> None:
    client = _client(modes_server, binding, version)
    try:
        async with asyncio.timeout(T):
            task = await client.send(_accepted_parts())
            assert isinstance(task, Task)
            assert task.status.state is TaskState.INPUT_REQUIRED
            events = [event async for event in client.stream(_accepted_parts())]
            assert isinstance(events[0], Task)
            for made in (task, events[0]):
                stored = await client.get_task(made.id)
                assert len(stored.history[0].parts) == 5
    finally:
        await client.aclose()


@pytest.mark.parametrize(("binding", "version"), ROUTES, ids=ROUTE_IDS)
async def test_a_refused_follow_up_leaves_the_task_unchanged(
    modes_server: ServerProcess, binding: str, version: str
) -> None:
    client = _client(modes_server, binding, version)
    try:
        async with asyncio.timeout(T):
            task = await client.send("start")
            assert isinstance(task, Task)
            assert task.status.state is TaskState.INPUT_REQUIRED
            before = await client.get_task(task.id)
            with pytest.raises(ContentTypeNotSupportedError) as sent:
                await client.send(_refused_parts(), task_id=task.id)
            _assert_refused(sent.value)
            with pytest.raises(ContentTypeNotSupportedError) as streamed:
                [event async for event in client.stream(_refused_parts(), task_id=task.id)]
            _assert_refused(streamed.value)
            after = await client.get_task(task.id)
            assert after == before
            # still open to an answer the agent accepts
            done = await client.send(_accepted_parts(), task_id=task.id)
            assert isinstance(done, Task)
            assert done.status.state is TaskState.COMPLETED
            assert done.artifacts[0].text_content == "5 parts"
    finally:
        await client.aclose()


@pytest.mark.parametrize(("binding", "version"), ROUTES, ids=ROUTE_IDS)
async def test_an_agent_that_declares_no_modes_accepts_any(
    open_server: ServerProcess, binding: str, version: str
) -> None:
    client = _client(open_server, binding, version)
    try:
        async with asyncio.timeout(T):
            task = await client.send(_refused_parts())
            assert isinstance(task, Task)
            assert task.status.state is TaskState.INPUT_REQUIRED
            done = await client.send(_refused_parts(), task_id=task.id)
            assert isinstance(done, Task)
            assert done.artifacts[0].text_content == "3 parts"
    finally:
        await client.aclose()


async def test_the_cards_say_what_is_checked(modes_server: ServerProcess, open_server: ServerProcess) -> None:
    async with httpx.AsyncClient(timeout=T) as http:
        declared_card = (await http.get(modes_server.url + "/.well-known/agent-card.json")).json()
        default_card = (await http.get(open_server.url + "/.well-known/agent-card.json")).json()
    assert declared_card["defaultInputModes"] == ["text/plain", "application/json"]
    assert declared_card["skills"][0]["inputModes"] == ["image/*"]
    assert default_card["defaultInputModes"] == ["text/plain"]  # the default card is unchanged on the wire


# --- the raw answers of every binding ------------------------------------------------------------------------------

PDF = base64.b64encode(b"%PDF-1.7").decode()


def _message10() -> dict[str, object]:
    return {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": "hi"}, {"raw": PDF, "mediaType": "application/pdf"}],
    }


def _message03() -> dict[str, object]:
    return {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [
            {"kind": "text", "text": "hi"},
            {"kind": "file", "file": {"bytes": PDF, "mimeType": "application/pdf"}},
        ],
    }


def _error_info(details: list[dict[str, object]]) -> dict[str, object]:
    [info] = [d for d in details if str(d.get("@type", "")).endswith("google.rpc.ErrorInfo")]
    return info


async def test_raw_http_answers(modes_server: ServerProcess) -> None:
    v10 = {"A2A-Version": "1.0"}
    async with httpx.AsyncClient(base_url=modes_server.url, timeout=T) as http:
        rpc10 = await http.post(
            "/",
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": _message10()}},
            headers=v10,
        )
        rpc03 = await http.post(
            "/", json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": _message03()}}
        )
        rest10 = await http.post("/message:send", json={"message": _message10()}, headers=v10)
        rest03 = await http.post(
            "/v1/message:send",
            json={
                "message": {
                    "messageId": str(uuid.uuid4()),
                    "role": "ROLE_USER",
                    "content": [{"file": {"fileWithBytes": PDF, "mimeType": "application/pdf"}}],
                }
            },
        )
    for answer in (rpc10, rpc03):
        assert answer.status_code == 200
        error = answer.json()["error"]
        assert error["code"] == -32005
        assert error["message"].startswith("message.parts[1]: media type application/pdf is not accepted")
        assert _error_info(error["data"])["reason"] == REASON
    assert rest10.status_code == 400
    status = rest10.json()["error"]
    assert (status["code"], status["status"]) == (400, "INVALID_ARGUMENT")
    assert _error_info(status["details"])["reason"] == REASON
    assert status["message"].startswith("message.parts[1]: media type application/pdf")
    # A2A 0.3's REST binding answered ContentTypeNotSupportedError with 415 (a2a-sdk 0.3), with the JSON-RPC error.
    assert rest03.status_code == 415
    assert rest03.json()["code"] == -32005
    assert rest03.json()["message"].startswith("message.parts[0]: media type application/pdf")


async def test_raw_grpc_answer(modes_server: ServerProcess) -> None:
    request = pb.SendMessageRequest(
        message=pb.Message(
            message_id=str(uuid.uuid4()),
            role=pb.ROLE_USER,
            parts=[pb.Part(text="hi"), pb.Part(raw=b"%PDF-1.7", media_type="application/pdf")],
        )
    )
    async with grpc.aio.insecure_channel(modes_server.grpc_address) as channel:
        call = channel.unary_unary(
            f"/{SERVICE_NAME}/SendMessage",
            request_serializer=pb.SendMessageRequest.SerializeToString,
            response_deserializer=pb.SendMessageResponse.FromString,
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(request, metadata=(("a2a-version", "1.0"),), timeout=T)
    error = caught.value
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (error.details() or "").startswith("message.parts[1]: media type application/pdf is not accepted")
    blob = dict(error.trailing_metadata() or ())["grpc-status-details-bin"]
    reasons = []
    for item in status_pb2.Status.FromString(blob).details:
        if item.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            item.Unpack(info)
            reasons.append(info.reason)
    assert reasons == [REASON]
