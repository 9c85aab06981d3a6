"""The composition root: one agent's engine, stores, event bus, work queue and push delivery, built from options,
with no transport. The HTTP app (``relaykit.http.create_app``), the gRPC server (``relaykit.grpc.GrpcServer``) and
the CLI all attach to the ``A2AServer`` that ``assemble`` returns.

>>> from relaykit import agent
>>> from relaykit.assembly import assemble
>>> @agent
... async def echo(context):
...     return context.text
>>> server = assemble(echo)   # then: await server.start() … await server.stop(), or attach bindings to it
"""

from relaykit.assembly._assemble import assemble, build_card
from relaykit.assembly._server import A2AServer

__all__ = ["A2AServer", "assemble", "build_card"]
