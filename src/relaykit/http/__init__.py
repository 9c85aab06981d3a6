"""HTTP bindings: JSON-RPC 2.0 and HTTP+JSON with SSE streaming, the agent card, and ``create_app``.

``A2AServer`` and ``build_card`` are ``relaykit.assembly``'s (the transport-neutral composition ``create_app``
serves), importable from here as well.

>>> from relaykit import agent
>>> from relaykit.http import create_app
>>> @agent
... async def echo(context):
...     return context.text
>>> app = create_app(echo, store="memory")
"""

from relaykit.assembly import A2AServer, build_card
from relaykit.http._app import create_app
from relaykit.http._jsonrpc import JSONRPCBinding
from relaykit.http._rest import RESTBinding

__all__ = ["A2AServer", "JSONRPCBinding", "RESTBinding", "build_card", "create_app"]
