"""The gRPC binding: service ``lf.a2a.v1.A2AService`` as rpcs generated from the operation table.

Every rpc decodes its request (protobuf ⇒ the pydantic model, validated exactly as the JSON bindings validate), calls
the ``RequestHandler`` method the operation names, and encodes the result. Wire conventions:

* **Metadata in** (``_metadata``): ``a2a-version`` (required: missing or empty means 0.3, and anything but 1.x is
  ``VersionNotSupportedError``, as on HTTP), ``a2a-extensions`` (comma-separated URIs; repeated entries are one
  list; ``x-a2a-extensions`` too), ``last-event-id`` (SubscribeToTask: resume after that event id, as SSE
  ``Last-Event-ID``).
* **Metadata out**: streams send initial metadata ``a2a-first-event-id: N`` with the first message. The events of one
  stream are consecutive numbers of the task's event sequence (the same ids SSE carries), so message *k* (from 0) has
  id ``N + k``; the trailing metadata carries ``a2a-last-event-id`` (the id of the last message sent). Activated
  extensions are echoed as ``a2a-extensions`` in the initial metadata (on the 0.3 service as ``x-a2a-extensions``
  too, the key 0.3 clients use).
* **Errors** (``_status``): the status code of the error table (digest §6.1/6.2) and a ``google.rpc.Status`` in the
  ``grpc-status-details-bin`` trailer. An error before a stream's first message ends the call with no message; a
  later one ends it after the messages already sent.
* A client that cancels a stream releases only its own subscription; the task runs on.
* **Request size** (``_bounds``): a request over ``OFF_LOOP_BYTES`` (32 KiB) is decoded in a worker thread after its
  fields are counted on the wire (more than ``MAX_FIELDS``: ``PayloadTooLargeError``, INVALID_ARGUMENT); a
  message's parts past ``MAX_PARTS`` are never converted (the model refuses it as it refuses the same JSON). So no
  request holds the event loop for more than a few tens of milliseconds, whatever its 10 MiB hold.
* A2A 0.3: ``v03_handler`` serves 0.3's ``a2a.v1.A2AService`` with the same closures over the same handler, given the
  0.3 codec's decode/encode (``relaykit._v03._grpc``).
* **Auth**: every call, of either version, is authenticated by the server's one ``relaykit.auth.Auth`` (metadata
  such as ``authorization`` / ``x-api-key``, and the client certificate of a mutual-TLS channel) before its request
  is decoded; a refusal is UNAUTHENTICATED (PERMISSION_DENIED from an interceptor), with the usual status details
  and, for UNAUTHENTICATED, the HTTP ``WWW-Authenticate`` challenges as ``www-authenticate`` trailing metadata.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from pydantic import ValidationError

from relaykit._errors import A2AError, InternalError, InvalidParamsError, invalid_params
from relaykit._methods import OPERATIONS, Operation
from relaykit._model import Encoded
from relaykit._proto import FIRST_EVENT_ID, LAST_EVENT_ID, SERVICE_NAME, decoder, encode_event, encoder, proto_class
from relaykit._types import SendMessageResponse
from relaykit._v03 import EXTENSIONS_HEADER
from relaykit._v03 import _grpc as v03
from relaykit.auth._gate import AuthRequest
from relaykit.grpc._bounds import OFF_LOOP_BYTES, decode_large
from relaykit.grpc._metadata import (
    call_metadata,
    check_v03_version,
    check_v10_version,
    extension_metadata,
    peer_certificate,
    resume_point,
)
from relaykit.grpc._status import error_status
from relaykit.server._context import CallContext
from relaykit.server._handler import RequestHandler

__all__ = ["GrpcBinding"]

log = logging.getLogger("relaykit.grpc")


class GrpcBinding:
    """The A2AService rpcs over a ``RequestHandler``, as one ``grpc.GenericRpcHandler``.

    >>> # server = grpc.aio.server(); server.add_generic_rpc_handlers((GrpcBinding(handler).generic_handler(),))
    """

    def __init__(
        self,
        handler: RequestHandler,
        *,
        ensure_started: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.handler = handler
        self.ensure_started = ensure_started

    def generic_handler(self) -> grpc.GenericRpcHandler:
        """Method handlers for every operation (``/lf.a2a.v1.A2AService/<Operation>``), bytes in and out."""
        methods: dict[str, grpc.RpcMethodHandler] = {}
        for op in OPERATIONS:
            if op.streaming:
                methods[op.grpc_name] = grpc.unary_stream_rpc_method_handler(self._streaming(op))
            else:
                methods[op.grpc_name] = grpc.unary_unary_rpc_method_handler(self._unary(op))
        return grpc.method_handlers_generic_handler(SERVICE_NAME, methods)

    def v03_handler(self) -> grpc.GenericRpcHandler:
        """The A2A 0.3 service ``a2a.v1.A2AService``: the same rpcs over the same handler, through the 0.3 codec."""
        methods: dict[str, grpc.RpcMethodHandler] = {}
        for rpc in v03.RPCS:
            op = rpc.op
            if op.streaming:
                handler = self._streaming(op, rpc.decoder(), v03.event_bytes, check_v03_version, rpc.request)
                methods[rpc.name] = grpc.unary_stream_rpc_method_handler(handler)
            else:
                unary = self._unary(op, rpc.decoder(), rpc.encoder(), check_v03_version, rpc.request)
                methods[rpc.name] = grpc.unary_unary_rpc_method_handler(unary)
        return grpc.method_handlers_generic_handler(v03.SERVICE_NAME, methods)

    async def _prepare(
        self,
        op: Operation,
        data: bytes,
        context: Any,
        decode: Callable[[bytes], Any],
        descriptor: Any,
        check_version: Callable[[str | None], None] = check_v10_version,
        legacy: bool = False,
    ) -> tuple[Any, CallContext, dict[str, str]]:
        if self.ensure_started is not None:
            await self.ensure_started()
        metadata = call_metadata(context)
        auth = self.handler.auth
        principal = await auth.authenticate(
            AuthRequest(metadata, binding="GRPC", peer_cert=lambda: peer_certificate(context))
        )
        check_version(metadata.get("a2a-version"))
        try:
            # A large request is counted and decoded off the loop (``_bounds``); a small one here, as cheaply as ever.
            request = decode(data) if len(data) <= OFF_LOOP_BYTES else await decode_large(decode, data, descriptor)
        except ValidationError as exc:
            raise invalid_params(exc) from None
        except (DecodeError, ValueError) as exc:  # ValueError: e.g. a NaN in a Struct (relaykit._proto)
            raise InvalidParamsError(
                f"the {op.name} request is not a valid {op.request.__name__} message: {exc}"
            ) from None
        if auth.interceptors:
            await auth.authorize(op.name, principal, request)
        # Both names count, as on HTTP (call_metadata has joined the repeated entries of each).
        raw = metadata.get("a2a-extensions", "")
        prefixed = metadata.get("x-a2a-extensions")
        if prefixed:
            raw = f"{raw},{prefixed}"
        requested = frozenset(part.strip() for part in raw.split(",") if part.strip())
        call = CallContext(
            user=principal.id,
            tenant=getattr(request, "tenant", ""),
            requested_extensions=requested,
            headers=metadata,
            principal=principal,
        )
        if legacy:
            self.handler.negotiate_extensions(call, header=EXTENSIONS_HEADER)
        else:
            self.handler.negotiate_extensions(call)
        return request, call, metadata

    def _unary(
        self,
        op: Operation,
        decode: Callable[[bytes], Any] | None = None,
        encode: Callable[[Any], bytes] | None = None,
        check_version: Callable[[str | None], None] | None = None,
        request_type: type[ProtoMessage] | None = None,
    ) -> Callable[[bytes, Any], Awaitable[bytes]]:
        # Defaults: the 1.0 service; the 0.3 service (v03_handler) passes its codec's functions, version rule and
        # request message.
        legacy = check_version is not None
        if decode is None:
            decode = decoder(op.request)
        descriptor = (request_type or proto_class(op.request)).DESCRIPTOR
        if encode is None and not legacy and op.response is not None:
            encode = encoder(op.response)
        version_rule = check_version or check_v10_version
        handler_name = op.handler
        public_card = legacy and handler_name == "get_extended_card"

        async def rpc(data: bytes, context: Any) -> bytes:
            try:
                if public_card and not self.handler.extended:
                    # 0.3's GetAgentCard with no extended card configured answers the public card, which needs
                    # no credential on any binding (CONTRACT: everything but the public card is authenticated).
                    assert encode is not None
                    return encode(self.handler.card)
                request, call, _ = await self._prepare(op, data, context, decode, descriptor, version_rule, legacy)
                result: Any = await self.handler.dispatch(handler_name, request, call)
                if call.activated_extensions:
                    await context.send_initial_metadata(extension_metadata(call, v03=legacy))
                if encode is None:
                    return b""  # google.protobuf.Empty
                if isinstance(result, Encoded) and not legacy:
                    result = SendMessageResponse.model_validate_json(result.data)
                return encode(result)
            except A2AError as exc:
                error = exc
            except Exception:
                log.exception("gRPC %s failed", op.name)
                error = InternalError()
            await context.abort_with_status(error_status(error))
            raise AssertionError("abort_with_status returned")  # pragma: no cover

        return rpc

    def _streaming(
        self,
        op: Operation,
        decode: Callable[[bytes], Any] | None = None,
        encode_data: Callable[[bytes], bytes] | None = None,
        check_version: Callable[[str | None], None] = check_v10_version,
        request_type: type[ProtoMessage] | None = None,
    ) -> Callable[[bytes, Any], AsyncIterator[bytes]]:
        if decode is None:
            decode = decoder(op.request)
        descriptor = (request_type or proto_class(op.request)).DESCRIPTOR
        legacy = check_version is not check_v10_version  # the 0.3 service (v03_handler)
        subscribe = op.name == "SubscribeToTask"
        handler_name = op.handler

        def encode(item: tuple[int, Any, bytes]) -> bytes:
            # 1.0: from the event object (compiled plans); 0.3: from the event's 1.0 JSON, through the codec.
            return encode_event(item[1]) if encode_data is None else encode_data(item[2])

        async def rpc(data: bytes, context: Any) -> AsyncIterator[bytes]:
            items: Any = None
            error: A2AError | None = None
            first: tuple[int, Any, bytes] | None = None
            call: CallContext | None = None
            try:
                request, call, metadata = await self._prepare(
                    op, data, context, decode, descriptor, check_version, legacy
                )
                if subscribe:
                    items = await self.handler.subscribe_to_task(request, call, resume_point(metadata))
                else:
                    items = await self.handler.dispatch(handler_name, request, call)
                # Pull the first event before answering: an error up to here ends the call with no message.
                first = await anext(items)
            except StopAsyncIteration:
                first = None
            except A2AError as exc:
                error = exc
            except Exception:
                log.exception("gRPC %s failed", op.name)
                error = InternalError()
            if error is not None or first is None or call is None:
                await _close(items)
                if error is not None:
                    await context.abort_with_status(error_status(error))
                return
            last = first[0]
            try:
                metadata_out = ((FIRST_EVENT_ID, str(last)), *extension_metadata(call, v03=legacy))
                await context.send_initial_metadata(metadata_out)
                yield encode(first)
                async for item in items:
                    yield encode(item)
                    last = item[0]
            except A2AError as exc:
                error = exc
            except Exception:
                log.exception("gRPC %s stream failed", op.name)
                error = InternalError()
            finally:
                await _close(items)
            trailer = ((LAST_EVENT_ID, str(last)),)
            if error is None:
                context.set_trailing_metadata(trailer)
                return
            # abort() replaces the trailing metadata: send the event id together with the status details.
            status = error_status(error)
            await context.abort(status.code, status.details, (*status.trailing_metadata, *trailer))

        return rpc


async def _close(items: Any) -> None:
    aclose = getattr(items, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
