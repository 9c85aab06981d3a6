"""relaykit: A2A 1.0 agent servers and clients — spec-exact, fast, durable.

>>> from relaykit import agent
>>> @agent
... async def echo(context):
...     return context.text
"""

from relaykit._errors import A2AError
from relaykit.server import (
    AgentContext,
    AgentExecutor,
    CallContext,
    EventEmitter,
    EventQueue,
    RequestContext,
    TaskEngine,
    TaskUpdater,
    agent,
)
from relaykit.types import (
    AgentCapabilities,
    AgentCard,
    AgentSkill,
    Artifact,
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

__version__ = "0.1.0"

__all__ = [
    "A2AError",
    "AgentCapabilities",
    "AgentCard",
    "AgentContext",
    "AgentExecutor",
    "AgentSkill",
    "Artifact",
    "CallContext",
    "EventEmitter",
    "EventQueue",
    "Message",
    "Part",
    "RequestContext",
    "Role",
    "StreamResponse",
    "Task",
    "TaskArtifactUpdateEvent",
    "TaskEngine",
    "TaskState",
    "TaskStatus",
    "TaskStatusUpdateEvent",
    "TaskUpdater",
    "__version__",
    "agent",
]
