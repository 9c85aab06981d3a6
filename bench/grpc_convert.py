"""Cost of model ⇄ protobuf conversion: the ProtoJSON reference vs the compiled plans the binding uses.

    python3 bench/grpc_convert.py [--number 5000]

Per message type, microseconds per call (best of 5): model ⇒ serialized protobuf, and serialized protobuf ⇒ model.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from datetime import UTC, datetime

from relaykit._card import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from relaykit._enums import TaskState
from relaykit._model import A2AModel
from relaykit._proto import from_proto, from_proto_json, proto_class, to_proto, to_proto_json
from relaykit._requests import SendMessageRequest
from relaykit._types import Artifact, Message, StreamResponse, Task, TaskArtifactUpdateEvent, TaskStatus


def samples() -> dict[str, A2AModel]:
    message = Message.user("hello benchmark", task_id="t-1", context_id="c-1")
    chunk = TaskArtifactUpdateEvent(
        task_id="t-1", context_id="c-1", artifact=Artifact.text("chunk 17", artifact_id="a-1"), append=True
    )
    task = Task(
        id="t-1",
        context_id="c-1",
        status=TaskStatus(state=TaskState.COMPLETED, timestamp=datetime.now(UTC)),
        artifacts=[Artifact.text("hello benchmark", artifact_id="a-1")],
        history=[message],
    )
    card = AgentCard(
        name="echo",
        description="echo agent",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        supported_interfaces=[AgentInterface(url="localhost:50051", protocol_binding="GRPC")],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )
    return {
        "StreamResponse (artifact chunk)": StreamResponse(artifact_update=chunk),
        "SendMessageRequest": SendMessageRequest(message=message),
        "Task (1 artifact, 1 message)": task,
        "AgentCard": card,
    }


def best(fn: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=5000)
    args = parser.parse_args()
    print("| type | encode ProtoJSON | encode compiled | decode ProtoJSON | decode compiled |")
    print("|---|---:|---:|---:|---:|")
    for name, model in samples().items():
        cls = type(model)
        data = to_proto(model).SerializeToString()
        parse = proto_class(cls).FromString
        row = [
            best(lambda m=model: to_proto_json(m).SerializeToString(), args.number),
            best(lambda m=model: to_proto(m).SerializeToString(), args.number),
            best(lambda d=data, c=cls, p=parse: from_proto_json(p(d), c), args.number),
            best(lambda d=data, c=cls, p=parse: from_proto(p(d), c), args.number),
        ]
        print(f"| {name} | " + " | ".join(f"{v:.1f} µs" for v in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
