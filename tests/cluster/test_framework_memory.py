"""Scale-out with a framework agent: its memory lives in the shared PostgreSQL store, so a conversation goes on on
another replica (issue 16: "works across replicas in scale-out mode").

The agent is ``examples/pydantic_ai_agent.py`` (pydantic-ai, offline ``FunctionModel``): ``You said: T (turn N)``,
N counting the turns of the context. Replica A runs the first turn and is stopped before the second, so the second
turn can only run on replica B, a process that never saw the first.
"""

from __future__ import annotations

import httpx
import pytest

from cluster.client import artifact_texts, message, send
from cluster.deploy import Deploy

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(90)]

AGENT = "examples/pydantic_ai_agent.py"
OFFLINE = {"OPENAI_API_KEY": None}  # the example's offline model, whatever the environment has


async def test_second_turn_on_another_replica_sees_the_first(deploy: Deploy) -> None:
    a = deploy(AGENT, count=1, env=OFFLINE)
    b = deploy(AGENT, count=1, env=OFFLINE)  # the same namespace: one PostgreSQL store, one Redis bus
    async with httpx.AsyncClient() as http:
        first = (await send(http, a.urls[0], message("hello")))["task"]
        assert first["status"]["state"] == "TASK_STATE_COMPLETED", first
        assert artifact_texts(first) == ["You said: hello (turn 1)"]
        assert a.servers[0].stop() is not None  # B is the only worker left
        second = (await send(http, b.urls[0], message("again", context_id=first["contextId"])))["task"]
        other = (await send(http, b.urls[0], message("elsewhere")))["task"]
    assert second["status"]["state"] == "TASK_STATE_COMPLETED", second
    assert artifact_texts(second) == ["You said: again (turn 2)"]
    assert artifact_texts(other) == ["You said: elsewhere (turn 1)"], "another context is another conversation"
