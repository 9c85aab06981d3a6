"""The server side: the executor contract users implement, and the engine that runs it.

>>> from relaykit.server import AgentExecutor, TaskUpdater
>>> class Echo(AgentExecutor):
...     async def execute(self, context, queue):
...         await TaskUpdater(queue, context).complete_with_text(context.text)
"""

from relaykit.server._agent import AgentContext, FunctionAgent, agent
from relaykit.server._context import ANONYMOUS, CallContext, RequestContext
from relaykit.server._engine import StreamItem, TaskEngine
from relaykit.server._executor import AgentExecutor
from relaykit.server._queue import EventQueue, QueueClosedError
from relaykit.server._updater import EventEmitter, TaskUpdater

__all__ = [
    "ANONYMOUS",
    "AgentContext",
    "AgentExecutor",
    "CallContext",
    "EventEmitter",
    "EventQueue",
    "FunctionAgent",
    "QueueClosedError",
    "RequestContext",
    "StreamItem",
    "TaskEngine",
    "TaskUpdater",
    "agent",
]
