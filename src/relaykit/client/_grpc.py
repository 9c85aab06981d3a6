"""The gRPC client transport: ``lf.a2a.v1.A2AService`` over ``grpc.aio``, for interfaces with binding ``GRPC``.

The interface URL is a bare ``host:port`` (``grpc://host:port`` is accepted too; ``grpcs://`` uses TLS with the
system roots). Every call sends ``a2a-version: 1.0`` and the client's headers as metadata (names lower-cased).
Errors come back as the core error classes, read from the ``google.rpc.Status`` in ``grpc-status-details-bin``
(``ErrorInfo.reason`` first, the status code otherwise); ``UNAVAILABLE`` without details is a connection error and
``DEADLINE_EXCEEDED`` a timeout, both retryable by the client's policy.

Size: the channel's receive limit is the client's ``max_response_bytes`` (16 MiB by default, as for HTTP bodies and
SSE events), so one unary answer or one stream message may be that long; grpc's own failure for a longer one
(RESOURCE_EXHAUSTED "CLIENT: Received message larger than max") is ``A2AResponseTooLargeError``. A server's own
RESOURCE_EXHAUSTED (a quota, or a request too large for it) stays ``ResourceExhaustedError``.

Messages never show a userinfo the target carries (``_urls.scrub``: grpc quotes the target when it cannot resolve it).

Event ids: a relaykit server (and any server following the same convention) sends ``a2a-first-event-id`` in a
stream's initial metadata; message *k* then has id first + *k*, and a resumed SubscribeToTask sends
``last-event-id``. Without that metadata (e.g. an a2a-sdk server) events carry no id and a resume starts from the
Task snapshot.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import grpc
from google.api import field_behavior_pb2
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from pydantic import ValidationError

from relaykit._errors import (
    BAD_REQUEST_TYPE,
    ERROR_INFO_TYPE,
    A2AConnectionError,
    A2AError,
    A2AResponseTooLargeError,
    A2ATimeoutError,
    InvalidAgentResponseError,
    UnsupportedOperationError,
    error_from_grpc,
)
from relaykit._methods import OPERATIONS, Operation
from relaykit._model import A2AModel
from relaykit._proto import FIRST_EVENT_ID, RESUME_FROM, SERVICE_NAME, decoder, encoder, proto_class
from relaykit._types import StreamResponse
from relaykit._v03 import EXTENSIONS_HEADER
from relaykit._v03 import _grpc as grpc03
from relaykit.client._transport import A2A_VERSION, MAX_RESPONSE_BYTES, StreamEvent
from relaykit.client._urls import redact_url, scrub

__all__ = ["GrpcTransport", "channel_credentials", "grpc_error", "spec_protojson"]

_DETAILS_KEY = "grpc-status-details-bin"
# grpc core's words when this side's receive limit stops a message ("CLIENT: ..."; the peer's limit says "SERVER: ").
_TOO_LARGE = re.compile(r"CLIENT: Received message larger than max \((\d+) vs\. (\d+)\)")


def _encode_v03(op: str, request: A2AModel) -> bytes:
    return grpc03.encode_request(op, request)[1]


def _stream_v03(data: bytes) -> StreamResponse:
    return StreamResponse.model_validate(grpc03.decode_event(data))


def _target(url: str) -> tuple[str, bool]:
    lowered = url.lower()  # schemes are case-insensitive (RFC 3986 §3.1)
    for scheme, secure in (("grpcs://", True), ("grpc://", False), ("https://", True), ("http://", False)):
        if lowered.startswith(scheme):
            return url[len(scheme) :].rstrip("/"), secure
    return url.rstrip("/"), False


def _decode_details(status: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            out.append(
                {
                    "@type": ERROR_INFO_TYPE,
                    "reason": info.reason,
                    "domain": info.domain,
                    "metadata": dict(info.metadata),
                }
            )
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations = [{"field": v.field, "description": v.description} for v in bad.field_violations]
            out.append({"@type": BAD_REQUEST_TYPE, "fieldViolations": violations})
        else:
            try:
                out.append(json_format.MessageToDict(detail))
            except (json_format.Error, TypeError, KeyError):
                out.append({"@type": detail.type_url})
    return out


def grpc_error(exc: grpc.aio.AioRpcError, target: str, op03: str | None = None) -> A2AError:
    """An ``A2AError`` for a failed call, from its status code, message and ``grpc-status-details-bin``; ``op03``:
    the operation, when the peer speaks 0.3 (whose errors carry no details; ``grpc03.error_in`` reads them)."""
    code = exc.code()
    name = code.name if code is not None else "UNKNOWN"
    message = scrub(exc.details() or "", target)
    shown = redact_url(target)
    details: list[dict[str, Any]] | None = None
    for key, value in exc.trailing_metadata() or ():
        if key == _DETAILS_KEY and isinstance(value, bytes):
            try:
                details = _decode_details(status_pb2.Status.FromString(value))
            except DecodeError:
                details = None
            break
    if details is None:
        if name == "UNAVAILABLE":
            return A2AConnectionError(f"cannot reach {shown}: {message or 'unavailable'}")
        if name == "DEADLINE_EXCEEDED":
            return A2ATimeoutError(f"{shown} did not answer in time")
        if name == "RESOURCE_EXHAUSTED" and (found := _TOO_LARGE.search(message)) is not None:
            return A2AResponseTooLargeError(
                f"{shown} sent a message of {found.group(1)} bytes, larger than {found.group(2)} "
                "(the client's max_response_bytes)"
            )
        if op03 is not None and (meant := grpc03.error_in(op03, name, message)) is not None:
            return meant
    return error_from_grpc(name, message, details)  # UNAVAILABLE is retried by the client's policy (``retryable``)


def channel_credentials(
    ca_certs: str | None = None, client_cert: str | tuple[str, str] | None = None
) -> grpc.ChannelCredentials:
    """TLS channel credentials: ``ca_certs`` (PEM bundle; the system roots when None) and a client certificate
    (``(certfile, keyfile)``, or one PEM file holding both) for mutual TLS."""

    def read(path: str | None) -> bytes | None:
        if path is None:
            return None
        with open(path, "rb") as file:
            return file.read()

    certfile, keyfile = (client_cert, client_cert) if isinstance(client_cert, str) else (client_cert or (None, None))
    return grpc.ssl_channel_credentials(
        root_certificates=read(ca_certs), private_key=read(keyfile), certificate_chain=read(certfile)
    )


class GrpcTransport:
    """A2A over gRPC to one ``host:port``.

    ``max_response_bytes`` bounds each message received (the channel's ``grpc.max_receive_message_length``).
    ``secure`` says whether the channel has TLS (a given ``channel`` is taken as the caller's: ``True``).

    >>> # transport = GrpcTransport("localhost:50051")
    >>> # async with Client(transport=transport) as client: ...
    """

    binding = "GRPC"

    def __init__(
        self,
        url: str,
        *,
        tenant: str = "",
        channel: grpc.aio.Channel | None = None,
        timeout: float | None = 60.0,
        stream_timeout: float | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: tuple[tuple[str, Any], ...] = (),
        v03: bool = False,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.url = url
        # An A2A 0.3 interface: service a2a.v1.A2AService through the 0.3 codec, no a2a-version metadata.
        self.v03 = v03
        self.tenant = tenant
        self.target, secure = _target(url)
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self._owns_channel = channel is None
        self.max_response_bytes = max_response_bytes
        # The credentials rule (``_plaintext``) reads this: a channel the caller made is theirs to judge.
        self.secure = secure or credentials is not None or channel is not None
        if channel is None:
            opts = (
                # One bound for every binding: what an HTTP body or SSE event may hold, a gRPC message may hold.
                ("grpc.max_receive_message_length", max_response_bytes),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
                *options,
            )
            if secure or credentials is not None:
                channel = grpc.aio.secure_channel(
                    self.target, credentials or grpc.ssl_channel_credentials(), options=opts
                )
            else:
                channel = grpc.aio.insecure_channel(self.target, options=opts)
        self.channel = channel
        self._unary: dict[str, Any] = {}
        self._streams: dict[str, Any] = {}
        self._encoders: dict[str, Callable[[A2AModel], bytes]] = {}
        self._decoders: dict[str, Callable[[bytes], Any]] = {}
        if v03:
            self._bind_v03(channel)
            return
        for op in OPERATIONS:
            path = f"/{SERVICE_NAME}/{op.grpc_name}"
            if op.streaming:
                self._streams[op.name] = channel.unary_stream(path)
                self._decoders[op.name] = decoder(StreamResponse)
            else:
                self._unary[op.name] = channel.unary_unary(path)
                if op.response is not None:
                    self._decoders[op.name] = decoder(op.response)
            self._encoders[op.name] = encoder(op.request)

    def _bind_v03(self, channel: grpc.aio.Channel) -> None:
        for rpc in grpc03.RPCS:
            op = rpc.op
            path = f"/{grpc03.SERVICE_NAME}/{rpc.name}"
            if op.streaming:
                self._streams[op.name] = channel.unary_stream(path)
                self._decoders[op.name] = _stream_v03
            else:
                self._unary[op.name] = channel.unary_unary(path)
                self._decoders[op.name] = functools.partial(grpc03.decode_result, op)
            self._encoders[op.name] = functools.partial(_encode_v03, op.name)

    def __repr__(self) -> str:
        return f"GrpcTransport({redact_url(self.url)!r})"

    async def aclose(self) -> None:
        """Close the channel (when this transport made it)."""
        if self._owns_channel:
            await self.channel.close()

    def _metadata(self, headers: Mapping[str, str]) -> list[tuple[str, str]]:
        metadata = {} if self.v03 else {"a2a-version": A2A_VERSION}
        for key, value in headers.items():
            metadata[key.lower()] = str(value)
        if self.v03 and "a2a-extensions" in metadata:
            # 0.3 agents read the extensions to activate from x-a2a-extensions (a2a-extensions is 1.0's name).
            metadata.setdefault(EXTENSIONS_HEADER.lower(), metadata["a2a-extensions"])
        return list(metadata.items())

    def _request(self, op: Operation, request: A2AModel) -> bytes:
        # Digest §5.14: the interface's tenant goes into every request.
        if self.tenant and hasattr(request, "tenant") and not getattr(request, "tenant", ""):
            request = request.model_copy(update={"tenant": self.tenant})
        return self._encoders[op.name](request)

    def _decode(self, op: Operation, data: bytes) -> Any:
        try:
            return self._decoders[op.name](data)
        except (DecodeError, ValidationError) as exc:
            raise InvalidAgentResponseError(f"the agent's {op.name} response is malformed: {exc}") from None

    async def call(self, op: Operation, request: A2AModel, *, headers: Mapping[str, str]) -> Any:
        """One unary rpc; returns the decoded response model (``None`` for Empty)."""
        response = await self._exchange(op, request, headers)
        if op.response is None:
            return None
        return self._decode(op, response)

    async def call_received(self, op: Operation, request: A2AModel, *, headers: Mapping[str, str]) -> tuple[Any, Any]:
        """``call``, with the response's ProtoJSON as well: what the client verifies a card's signature on.

        The signature is over the card's JSON (RFC 8785), and gRPC sends protobuf: the message received, rendered as
        the spec's canonical form rebuilds a card (digest §7.5: ProtoJSON, proto field names in camelCase, enums by
        name, fields at their default left out except the REQUIRED ones, kept even when empty: ``"tags": []``,
        ``"description": ""``; ``spec_protojson``), is the card as this client can know it. That is sound: every
        member the client reads is a field of that message and so in the payload checked, and a field its schema
        does not know is neither rendered nor read (a signature that covered one fails to verify: a card refused,
        never one accepted that was not signed).

        Limitation: protobuf does not carry whether a field that is neither REQUIRED nor ``optional`` was present at
        its default, so a signature over JSON that kept such a field (``"required": false`` in an extension,
        ``"examples": []``), which the spec's form leaves out, cannot be rebuilt here: such a card verifies over
        HTTP (its JSON as received) and is refused over gRPC (fail closed). A relaykit agent's own signatures verify
        on both (the verifier also tries the decoded card's canonical form)."""
        response = await self._exchange(op, request, headers)
        if op.response is None:
            return None, None
        cls = grpc03.RPCS_BY_OP[op.name].response if self.v03 else proto_class(op.response)
        assert cls is not None
        try:
            received = spec_protojson(cls.FromString(response))
        except (DecodeError, json_format.Error) as exc:
            raise InvalidAgentResponseError(f"the agent's {op.name} response is malformed: {exc}") from None
        return self._decode(op, response), received

    async def _exchange(self, op: Operation, request: A2AModel, headers: Mapping[str, str]) -> bytes:
        """One unary rpc; the serialized response."""
        if op.name not in self._unary and op.name not in self._streams:
            raise UnsupportedOperationError(f"{op.name} has no A2A 0.3 gRPC rpc")
        data = self._request(op, request)
        try:
            response: bytes = await self._unary[op.name](data, metadata=self._metadata(headers), timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise grpc_error(exc, self.target, op.name if self.v03 else None) from None
        return response

    async def stream(
        self, op: Operation, request: A2AModel, *, headers: Mapping[str, str], last_event_id: str | None = None
    ) -> AsyncIterator[StreamEvent]:
        """One server-streaming rpc: ``(event id or None, StreamResponse)`` until the server ends the call."""
        metadata = self._metadata(headers)
        if last_event_id is not None:
            metadata.append((RESUME_FROM, last_event_id))
        call = self._streams[op.name](self._request(op, request), metadata=metadata, timeout=self.stream_timeout)
        try:
            first: int | None = None
            for key, value in await call.initial_metadata() or ():
                if key == FIRST_EVENT_ID and isinstance(value, str) and value.isdigit():
                    first = int(value)
            index = 0
            async for data in call:
                event_id = str(first + index) if first is not None else None
                index += 1
                yield event_id, self._decode(op, data)
        except grpc.aio.AioRpcError as exc:
            raise grpc_error(exc, self.target, op.name if self.v03 else None) from None
        finally:
            if not call.done():
                call.cancel()


def spec_protojson(message: Message) -> dict[str, Any]:
    """``message`` as ProtoJSON in the form A2A signs a card in (digest §7.5): ``json_format.MessageToDict`` (unset
    ``optional`` fields and other defaults left out, set ``optional`` ones kept), with every field marked
    ``google.api.field_behavior = REQUIRED`` kept at its default when it holds one (``[]``, ``{}``, ``""``, ``false``,
    ``0``, the zero enum), at every depth.

    >>> from relaykit._grpc_gen import a2a_pb2 as pb
    >>> spec_protojson(pb.AgentSkill(id="s", name="S"))
    {'id': 's', 'name': 'S', 'description': '', 'tags': []}
    """
    rendered: dict[str, Any] = json_format.MessageToDict(message)
    _keep_required(message, rendered)
    return rendered


def _keep_required(message: Message, rendered: dict[str, Any]) -> None:
    for field, required in _fields(message.DESCRIPTOR):
        name = field.json_name
        sub = field.message_type
        if sub is not None and sub.full_name.startswith("google.protobuf."):
            continue  # a well-known type (Struct, Timestamp): its JSON is its own, with no empty form to keep
        if name not in rendered:
            if required:
                rendered[name] = _default(field)
                if sub is not None and not field.is_repeated:
                    _keep_required(getattr(message, field.name), rendered[name])
            continue
        if sub is None:
            continue
        value = getattr(message, field.name)
        if sub.GetOptions().map_entry:
            if sub.fields_by_name["value"].message_type is not None:
                for key, item in value.items():
                    entry = rendered[name].get(str(key))
                    if isinstance(entry, dict):
                        _keep_required(item, entry)
        elif field.is_repeated:
            for item, entry in zip(value, rendered[name], strict=False):
                _keep_required(item, entry)
        else:
            _keep_required(value, rendered[name])


@functools.cache
def _fields(descriptor: Descriptor) -> tuple[tuple[FieldDescriptor, bool], ...]:
    """A message's fields, each with whether it is REQUIRED; a oneof's members never are (one of them is set)."""
    out: list[tuple[FieldDescriptor, bool]] = []
    for field in descriptor.fields:
        behaviors = field.GetOptions().Extensions[field_behavior_pb2.field_behavior]
        required = field_behavior_pb2.REQUIRED in behaviors and field.containing_oneof is None
        out.append((field, required))
    return tuple(out)


def _default(field: FieldDescriptor) -> Any:
    """A field's default as ProtoJSON renders a value (64-bit integers as strings, enums by name)."""
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return {}
    if field.is_repeated:
        return []
    if field.message_type is not None:
        return {}
    if field.enum_type is not None:
        return field.enum_type.values_by_number[0].name
    cpp = field.cpp_type
    if cpp == FieldDescriptor.CPPTYPE_STRING:
        return ""
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return False
    if cpp in (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64):
        return "0"
    return 0
