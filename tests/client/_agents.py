"""relaykit agents and apps the client tests serve with ``relaykit serve tests/client/_agents.py:NAME``.

``kitchen`` (executor) / ``kitchen_app`` (with an extended card, webhooks to 127.0.0.1 allowed): the same behaviour
as ``_sdk_server.py``:

  text T                -> Task COMPLETED with one artifact (text T)
  'stream N [D]'        -> N artifact chunks of one artifact ('chunk 0' ...), D ms apart (default 0), then COMPLETED
  'slow N'              -> WORKING, N chunks ('slow 0' ...) 0.2 s apart, then COMPLETED (subscribe / cancel tests)
  'ask ...'             -> INPUT_REQUIRED 'What is your name?'; the follow-up A on that task -> COMPLETED 'got: A'
  'message T'           -> a bare Message 'you said: T' (no task)
  'fail' / 'reject' / 'auth' -> FAILED / REJECTED / AUTH_REQUIRED with a status message
  'silent'              -> returns without publishing anything (the caller gets InvalidAgentResponseError)

and, relaykit only (in-task authorization, digest §7.4):

  'calendar'            -> AUTH_REQUIRED 'Calendar access needed: send a token in X-Calendar-Token'
  a follow-up on an AUTH_REQUIRED task -> COMPLETED 'calendar: 3 meetings' when its request carries the header
                           X-Calendar-Token: CALENDAR_TOKEN, else AUTH_REQUIRED again 'that is no calendar token'

``kitchen_app`` also has the out-of-band side of that: ``POST /test/grant/{task_id}`` does what an agent's OAuth
callback would, the credential reaching the agent by another way than the client: it continues the task with the
token (a message whose request carries it). With ``?after_subscribe=1`` it first waits (bounded) until a client has
subscribed to the task, so a test can have a client waiting before the task moves on.

``strict_app``: the kitchen with a card that requires the extension ``REQUIRED_EXTENSION`` and advertises an
extended card without configuring one (ExtensionSupportRequiredError / ExtendedAgentCardNotConfiguredError).

``timeout_app``: the kitchen whose blocking SendMessage answers after ``SEND_TIMEOUT`` seconds with the task as it is
then (WORKING, for ``slow N``), as a relaykit server given a send timeout does.

``raising_app``: the kitchen whose request handler raises, on demand, any error of the table through the protocol
(an executor cannot: the engine turns executor exceptions into FAILED tasks):

* GetTask / CancelTask / SubscribeToTask with id ``raise-<ErrorClassName>`` raise it (for SubscribeToTask, before
  the first event); ``raise-crash`` raises a plain RuntimeError (the binding answers InternalError);
* SendStreamingMessage with text ``raise-mid-<ErrorClassName>`` sends the first event, then fails the stream with it
  (an SSE ``event: error`` frame);
* its request body limit is ``MAX_BODY`` bytes (a larger message gets HTTP 413).

Apps read their public URL from ``RELAYKIT_TEST_PUBLIC_URL`` (set by ``support.servers.start_serve``).
"""

import asyncio
import os
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from relaykit import AgentExecutor, Message, RequestContext, TaskState, TaskUpdater
from relaykit import errors as rk_errors
from relaykit._card import AgentCapabilities, AgentCard, AgentExtension, AgentSkill
from relaykit.auth import APIKeyAuthenticator, Auth
from relaykit.http import create_app
from relaykit.server import CallContext, EventQueue
from relaykit.server._handler import RequestHandler
from relaykit.types import SendMessageConfiguration, SendMessageRequest

PUBLIC_URL = os.environ.get("RELAYKIT_TEST_PUBLIC_URL", "http://127.0.0.1:8000")
REQUIRED_EXTENSION = "urn:relaykit-test:required/v1"
MAX_BODY = 256 * 1024
STREAM_RE = re.compile(r"^stream (\d+)(?: (\d+))?")
SLOW_RE = re.compile(r"^slow (\d+)")
CALENDAR_TOKEN = "calendar-token-7"  # the credential the 'calendar' task needs (header X-Calendar-Token)
GRANT_WAIT = 10.0  # seconds the grant route waits for a client to subscribe, when told to


class Kitchen(AgentExecutor):
    """Dispatches on the message text (see the module docstring)."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = TaskUpdater(queue, context)
        text = context.text
        task = context.task
        if task is None and text.startswith("message "):
            await queue.enqueue_event(
                Message.agent(f"you said: {text[len('message ') :]}", context_id=context.context_id)
            )
            return
        if task is not None and task.status.state is TaskState.INPUT_REQUIRED:
            await updater.artifact(f"got: {text}", artifact_id="answer", name="answer")
            await updater.complete()
            return
        if task is not None and task.status.state is TaskState.AUTH_REQUIRED:
            # The credential comes with the request (a header the client added, or the out-of-band grant's).
            if context.call.headers.get("x-calendar-token") == CALENDAR_TOKEN:
                await updater.artifact("calendar: 3 meetings", artifact_id="answer", name="answer")
                await updater.complete()
            else:
                await updater.requires_auth("that is no calendar token")
            return
        if text == "calendar":
            await updater.requires_auth("Calendar access needed: send a token in X-Calendar-Token")
            return
        if text == "silent":
            return
        if text.startswith("ask"):
            await updater.requires_input("What is your name?")
            return
        if text == "fail":
            await updater.fail("it failed")
            return
        if text == "reject":
            await updater.reject("rejected")
            return
        if text == "auth":
            await updater.requires_auth("sign in first")
            return
        m = STREAM_RE.match(text)
        if m:
            n, delay = int(m.group(1)), int(m.group(2) or 0) / 1000
            await updater.working()
            for i in range(n):
                if delay:
                    await asyncio.sleep(delay)
                await updater.artifact(
                    f"chunk {i}", artifact_id="stream", name="stream", append=i > 0, last_chunk=i == n - 1
                )
            await updater.complete()
            return
        m = SLOW_RE.match(text)
        if m:
            n = int(m.group(1))
            await updater.working()
            for i in range(n):
                await asyncio.sleep(0.2)
                await updater.artifact(
                    f"slow {i}", artifact_id="slow", name="slow", append=i > 0, last_chunk=i == n - 1
                )
            await updater.complete()
            return
        await updater.artifact(text, artifact_id="echo", name="echo")
        await updater.complete()


kitchen = Kitchen()


def _card(name: str, *, extensions: list[AgentExtension] | None = None, extended: bool | None = None) -> AgentCard:
    return AgentCard(
        name=name,
        description="client test agent",
        version="1.0.0",
        skills=[AgentSkill(id="echo", name="echo", description="echoes text", tags=["echo"])],
        capabilities=AgentCapabilities(extensions=extensions or [], extended_agent_card=extended),
    )


def _raise(name: str, message: str) -> None:
    if name == "crash":
        raise RuntimeError("a bug in the handler")
    cls = getattr(rk_errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, rk_errors.A2AError)):
        raise rk_errors.InvalidParamsError(f"no error class {name!r}")
    raise cls(message)


class RaisingHandler(RequestHandler):
    """Raises the error an id (``raise-Name``) or a streamed text (``raise-mid-Name``) names.

    (No ``:`` in these ids: REST puts the id in the path, where ``:`` starts the ``:cancel`` / ``:subscribe`` verb.)
    """

    async def dispatch(self, method: str, request: Any, call: Any) -> Any:
        task_id = getattr(request, "id", "")
        if isinstance(task_id, str) and task_id.startswith("raise-"):
            _raise(task_id.removeprefix("raise-"), "raised on request")
        return await super().dispatch(method, request, call)

    async def subscribe_to_task(self, request: Any, call: Any, last_event_id: int | None = None) -> Any:
        if request.id.startswith("raise-"):
            _raise(request.id.removeprefix("raise-"), "raised on request")
        return await super().subscribe_to_task(request, call, last_event_id)

    async def send_streaming_message(self, request: Any, call: Any) -> Any:
        text = request.message.text
        items = await super().send_streaming_message(request, call)
        if not text.startswith("raise-mid-"):
            return items
        return self._fail_after_first(items, text.removeprefix("raise-mid-"))

    @staticmethod
    async def _fail_after_first(items: Any, name: str) -> AsyncIterator[Any]:
        try:
            yield await anext(items)
        finally:
            await items.aclose()
        _raise(name, "raised mid-stream")


# The kitchen accepts anonymous callers and this key; the extended card needs the key (spec §5.13).
KITCHEN_KEY = "key-123"


# Set once a client's subscription to the task is open (it sees every event after that): see ``KitchenHandler``.
_subscribed: dict[str, asyncio.Event] = {}


def _subscription(task_id: str) -> asyncio.Event:
    return _subscribed.setdefault(task_id, asyncio.Event())


class KitchenHandler(RequestHandler):
    """The kitchen's handler: tells the grant route when a client has subscribed to a task."""

    async def subscribe_to_task(self, request: Any, call: Any, last_event_id: int | None = None) -> Any:
        items = await super().subscribe_to_task(request, call, last_event_id)
        _subscription(request.id).set()  # the engine opened the subscription's tap before answering
        return items


async def _grant(request: Request) -> Response:
    """``POST /test/grant/{task_id}``: the calendar token reaches the agent out of band (module docstring)."""
    engine = request.app.state.relaykit.engine
    task_id = request.path_params["task_id"]
    if request.query_params.get("after_subscribe") == "1":
        async with asyncio.timeout(GRANT_WAIT):
            await _subscription(task_id).wait()
    _subscribed.pop(task_id, None)
    message = Message.user("calendar access granted", task_id=task_id)
    configuration = SendMessageConfiguration(return_immediately=True)
    # The task is the anonymous caller's: the grant continues it as that caller, with the token in its headers.
    call = CallContext(headers={"x-calendar-token": CALENDAR_TOKEN})
    await engine.send(SendMessageRequest(message=message, configuration=configuration), call)
    return Response(status_code=202)


def _kitchen_app() -> Any:
    app = create_app(
        kitchen,
        card=_card("relaykit-kitchen"),
        store="memory",
        public_url=PUBLIC_URL,
        grace=1.0,
        push_allow=("127.0.0.1",),  # the tests' webhooks are on 127.0.0.1 (nobody listens: deliveries just fail)
        auth=Auth(APIKeyAuthenticator({"kitchen-tester": KITCHEN_KEY}, header="X-Api-Key"), required=False),
        extended_card=_card("relaykit-kitchen (extended)").model_copy(
            update={
                "skills": [
                    AgentSkill(id="echo", name="echo", description="echoes text", tags=["echo"]),
                    AgentSkill(id="secret", name="secret", description="extended-only skill", tags=["x"]),
                ]
            }
        ),
    )
    # First: the REST binding's tenant routes (``/{tenant}/…``) would take the path otherwise.
    app.router.routes.insert(0, Route("/test/grant/{task_id}", _grant, methods=["POST"]))
    # The bindings hold this handler object: giving it the kitchen's class changes what they call, nothing else.
    app.state.relaykit.handler.__class__ = KitchenHandler
    return app


_FACTORIES = {
    "kitchen_app": lambda: _kitchen_app(),
    "strict_app": lambda: create_app(
        kitchen,
        card=_card(
            "relaykit-strict",
            extensions=[AgentExtension(uri=REQUIRED_EXTENSION, description="must be activated", required=True)],
            extended=True,
        ),
        store="memory",
        public_url=PUBLIC_URL,
        grace=1.0,
    ),
    "raising_app": lambda: _raising_app(),
    "timeout_app": lambda: _timeout_app(),
}

SEND_TIMEOUT = 0.1


def _timeout_app() -> Any:
    app = create_app(kitchen, card=_card("relaykit-timeout"), store="memory", public_url=PUBLIC_URL, grace=1.0)
    # ``create_app`` has no option for it: the engine's send timeout is set on the engine it built.
    app.state.relaykit.engine.send_timeout = SEND_TIMEOUT
    return app


def _raising_app() -> Any:
    app = create_app(
        kitchen, card=_card("relaykit-raising"), store="memory", public_url=PUBLIC_URL, grace=1.0, max_body=MAX_BODY
    )
    # The bindings hold this handler object: giving it the raising class changes what they call, nothing else.
    app.state.relaykit.handler.__class__ = RaisingHandler
    return app


def __getattr__(name: str) -> Any:
    # Apps are built on first use, so serving one does not build (and start engines for) the others.
    factory = _FACTORIES.get(name)
    if factory is None:
        raise AttributeError(name)
    app = factory()
    globals()[name] = app
    return app
