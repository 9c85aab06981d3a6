"""The gRPC edge of ``Telemetry``: a server interceptor that serves each A2A rpc inside its span.

Installed by ``relaykit.grpc.GrpcServer`` only when the server has telemetry; health and reflection rpcs pass
through untouched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from relaykit.telemetry._seam import Telemetry

__all__ = ["TelemetryInterceptor"]


def _metadata(details: Any) -> dict[str, str]:
    return {key: value for key, value in (details.invocation_metadata or ()) if isinstance(value, str)}


def _failed(call: Any, context: Any) -> None:
    if call.error:
        return  # the handler's A2A reason
    code = getattr(context, "code", None)
    value = code() if callable(code) else None
    call.error = getattr(value, "name", None) or "INTERNAL"


_OPS_03: dict[str, str] = {}


def _operations_03() -> dict[str, str]:
    # The 0.3 codec is loaded only by a server that serves 0.3 gRPC (it brings its generated messages).
    if not _OPS_03:
        from relaykit._v03._grpc import RPCS

        _OPS_03.update({rpc.name: rpc.op.name for rpc in RPCS})
    return _OPS_03


class TelemetryInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """One server span and one requests/duration record per A2A rpc (1.0 and 0.3 services)."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: Any) -> Any:
        handler = await continuation(details)
        service, _, operation = str(details.method).rpartition("/")
        if handler is None or not service.endswith("A2AService"):
            return handler
        version = "1.0"
        if service.startswith("/a2a.v1."):
            # A 0.3 rpc is named as in 0.3 (TaskSubscription, ...): its span carries the operation's 1.0 name, so one
            # query finds an operation whatever version the caller spoke.
            version = "0.3"
            operation = _operations_03().get(operation, operation)
        telemetry = self.telemetry
        if handler.unary_unary is not None:
            unary_inner = handler.unary_unary

            async def unary(request: Any, context: Any) -> Any:
                call, call_token, span_token = telemetry.begin("grpc", _metadata(details), operation, version)
                try:
                    return await unary_inner(request, context)
                except BaseException:
                    _failed(call, context)
                    raise
                finally:
                    telemetry.end(call, call_token, span_token, version)

            return grpc.unary_unary_rpc_method_handler(
                unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            stream_inner = handler.unary_stream

            async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
                call, call_token, span_token = telemetry.begin("grpc", _metadata(details), operation, version)
                try:
                    async for item in stream_inner(request, context):
                        yield item
                except BaseException:
                    _failed(call, context)
                    raise
                finally:
                    telemetry.end(call, call_token, span_token, version)

            return grpc.unary_stream_rpc_method_handler(
                stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler
