"""The gRPC binding of A2A 1.0: service ``lf.a2a.v1.A2AService`` over ``grpc.aio``, with health and reflection.

Needs the ``grpc`` extra (``pip install 'relaykit[grpc]'``). The protobuf code is generated from ``proto/a2a.proto``
into a private descriptor pool, so relaykit and a2a-sdk (which registers ``lf.a2a.v1`` in protobuf's default pool)
work side by side in one process.

>>> from relaykit import agent
>>> from relaykit.http import create_app
>>> from relaykit.grpc import GrpcServer
>>> @agent
... async def echo(context):
...     return context.text
>>> app = create_app(echo, grpc_url="localhost:50051")   # the card lists the GRPC interface
>>> grpc_server = GrpcServer(app, port=50051)              # await grpc_server.start() next to the HTTP server

gRPC only: serve the assembly without the HTTP app, ``GrpcServer(relaykit.assembly.assemble(echo), port=50051)``.

Metadata conventions (see ``relaykit.grpc._binding``): requests carry ``a2a-version`` (required), ``a2a-extensions``
and, for SubscribeToTask, ``last-event-id``; streams answer with initial metadata ``a2a-first-event-id`` (message *k*
has id first + *k*) and trailing metadata ``a2a-last-event-id``.
"""

from relaykit._proto import FIRST_EVENT_ID, LAST_EVENT_ID, POOL, RESUME_FROM, SERVICE_NAME, from_proto, to_proto
from relaykit.grpc._binding import GrpcBinding
from relaykit.grpc._metadata import peer_certificate
from relaykit.grpc._server import GrpcServer, server_credentials
from relaykit.grpc._status import error_status

__all__ = [
    "FIRST_EVENT_ID",
    "LAST_EVENT_ID",
    "POOL",
    "RESUME_FROM",
    "SERVICE_NAME",
    "GrpcBinding",
    "GrpcServer",
    "error_status",
    "from_proto",
    "peer_certificate",
    "server_credentials",
    "to_proto",
]
