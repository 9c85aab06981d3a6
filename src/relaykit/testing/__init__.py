"""Testing kit: talk to an agent in-process, script a fake agent, and pytest fixtures for both.

* ``InProcessClient(executor_or_app)``: ``async with`` it to get a connected ``relaykit.client.Client`` whose
  requests go through ASGI in the same event loop (no sockets; streams are live).
* ``ScriptedAgent([...])``: an ``AgentExecutor`` that replays steps (``working``, ``artifact``, ``chunks``,
  ``input_required``, ``complete``, ``fail``, …), so you can test a client against known behaviour.
* ``ServerThread(executor_or_app)``: a real uvicorn server on 127.0.0.1 in a background thread.
* pytest plugin (installed with relaykit): fixtures ``a2a_agent``, ``a2a_client``, ``a2a_server``
  (see ``relaykit.testing.plugin``).

>>> from relaykit.testing import InProcessClient, ScriptedAgent, artifact, complete, input_required
>>> agent = ScriptedAgent([input_required("Your name?"), artifact("Hello!"), complete()])
>>> async def test_two_turns():
...     async with InProcessClient(agent) as client:
...         task = await client.send("hi")
...         assert task.status.state.name == "INPUT_REQUIRED"
...         task = await client.send("Ada", task_id=task.id)
...         assert task.artifacts[0].text_content == "Hello!"
"""

from relaykit.testing._inprocess import InProcessClient, StreamingASGITransport, build_app
from relaykit.testing._scripted import (
    ScriptedAgent,
    Step,
    Turn,
    artifact,
    auth_required,
    call,
    canceled,
    chunks,
    complete,
    fail,
    input_required,
    message,
    raise_error,
    reject,
    sleep,
    status,
    wait_for,
    working,
)
from relaykit.testing._server import ServerThread

__all__ = [
    "InProcessClient",
    "ScriptedAgent",
    "ServerThread",
    "Step",
    "StreamingASGITransport",
    "Turn",
    "artifact",
    "auth_required",
    "build_app",
    "call",
    "canceled",
    "chunks",
    "complete",
    "fail",
    "input_required",
    "message",
    "raise_error",
    "reject",
    "sleep",
    "status",
    "wait_for",
    "working",
]
