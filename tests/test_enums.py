"""Proto enums on the wire: the proto name, encoded straight from the member (``str``), never the Python name."""

import json

import pytest

from relaykit._enums import Role, TaskState
from relaykit._requests import ListTasksRequest
from relaykit._types import Message, Part, TaskStatus


@pytest.mark.parametrize("state", list(TaskState))
def test_task_state_encodes_as_its_value(state: TaskState) -> None:
    status = TaskStatus(state=state)
    assert json.loads(status.to_json())["state"] == state.value
    assert type(status.to_dict()["state"]) is str
    assert status.model_dump()["state"] is state  # Python mode keeps the member
    assert TaskStatus.from_json(status.to_json()).state is state
    request = ListTasksRequest(status=state)
    assert json.loads(request.to_json()).get("status", TaskState.UNSPECIFIED.value) == state.value


@pytest.mark.parametrize("role", [Role.USER, Role.AGENT])
def test_role_encodes_as_its_value(role: Role) -> None:
    message = Message(message_id="m", role=role, parts=[Part(text="x")])
    assert message.to_json() == b'{"messageId":"m","role":"%s","parts":[{"text":"x"}]}' % role.value.encode()
    assert message.to_dict()["role"] == role.value
    assert message.model_dump()["role"] is role
