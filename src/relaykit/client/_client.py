"""``Client``: one method per A2A operation, over the transport the agent card and the client agree on.

Behaviour a caller relies on:

* streams survive drops: on a network error, a retryable HTTP status, or a stream that ends before the task is
  final, the client re-subscribes to the same task with ``Last-Event-ID`` (bounded attempts, exponential backoff with
  jitter); events are de-duplicated (messages by id, artifact chunks by position) and a snapshot received on resume is
  turned into exactly the chunks and status the application has not seen, so the application sees one stream;
  attempts exhausted ⇒ ``A2AReconnectError(attempts=N)``;
* idempotent operations retry on connection errors and 502/503/504; SendMessage only when ``retry_send`` is on
  (same messageId, for servers that de-duplicate it);
* ``ask()`` follows a task to its end, answering INPUT_REQUIRED through ``on_input_required`` and resolving
  AUTH_REQUIRED through ``on_auth_required`` when given (``_interrupts``), and raises ``A2ATaskFailedError`` /
  ``A2ATaskRejectedError`` / ``A2ATaskAuthRequiredError`` / ``A2ATaskInputRequiredError`` (all in
  ``relaykit.errors``) for those outcomes;
* a fetched card, the public one and the extended one alike, goes through ``card_verifier`` (``_card_trust``), on
  its JSON as received, before anything else reads it;
* credentials never go without TLS to a host that is not loopback, on any binding, unless
  ``allow_insecure_credentials`` (``_plaintext``: decided once per connection, so a TLS or loopback client checks
  nothing per call);
* URLs in messages and reprs are redacted (``_urls``).

Modules: this one holds ``Client`` (and re-exports the policies); ``_resume`` the loop that resumes a dropped stream;
``_stream_view`` ``StreamView``, the de-duplication that makes a resumed stream one stream; ``_interrupts`` what the
human-in-the-loop handlers may return; ``_policies`` ``RetryPolicy`` / ``ResumePolicy`` and what counts as
retryable; ``_card`` the card and the transport preferences.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx

from relaykit._card import AgentCard, AgentInterface
from relaykit._enums import TaskState
from relaykit._errors import (
    A2AError,
    A2AReconnectError,
    A2ATaskAuthRequiredError,
    A2ATaskFailedError,
    A2ATaskInputRequiredError,
    A2ATaskRejectedError,
    InvalidParamsError,
    TaskNotCancelableError,
    UnsupportedOperationError,
)
from relaykit._methods import OPERATIONS_BY_NAME, Operation
from relaykit._model import A2AModel
from relaykit._requests import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from relaykit._state import ACTIVE, apply
from relaykit._types import (
    AuthenticationInfo,
    Message,
    Part,
    SendMessageResponse,
    Task,
    TaskPushNotificationConfig,
    TaskStatus,
)
from relaykit._v03 import is_v03
from relaykit.client._auth import APIKeyAuth, Interceptor, TraceContext
from relaykit.client._card import DEFAULT_TRANSPORTS, CardResolver, card_url, choose_interface, grpc_available
from relaykit.client._card_trust import CardVerifier, run_verifier
from relaykit.client._interrupts import AuthHandler, AuthReply, Credentials, InputHandler, call_handler
from relaykit.client._plaintext import CredentialGuard, guard
from relaykit.client._policies import ResumePolicy, RetryPolicy, retryable
from relaykit.client._resume import aclose_stream, resume_stream
from relaykit.client._stream_view import Event, same_status
from relaykit.client._tls import tls_verify
from relaykit.client._transport import (
    MAX_RESPONSE_BYTES,
    ClientTransport,
    JSONRPCTransport,
    RESTTransport,
    StreamEvent,
)
from relaykit.client._urls import redact_url
from relaykit.telemetry import client_span, client_tracer, span_current, start_client_span

__all__ = ["Client", "ResumePolicy", "RetryPolicy"]

# Consulted when a retried call fails: a result that stands for the call's success, or None (the error stands).
_Recovery = Callable[[A2AError], Awaitable[Any]]


# The default policies: frozen, so every client may share one instance of each.
_DEFAULT_RETRY = RetryPolicy()
_DEFAULT_RESUME = ResumePolicy()


class Client:
    """An A2A client for one agent: 1.0, or 0.3 where the card offers only that (``protocol_version="0.3"`` speaks
    0.3 to a dual-stack agent; ``"1.0"`` refuses a 0.3-only one).

    >>> import asyncio
    >>> from relaykit.client import Client
    >>> async def main():
    ...     async with Client("http://localhost:8000") as client:
    ...         print(await client.ask("hello"))

    TLS: ``ca_certs`` (a PEM bundle to trust instead of the system's) and ``client_cert`` (``(certfile, keyfile)``,
    or one PEM file with both, for mutual TLS) apply to every binding: HTTP and gRPC alike.

    ``max_response_bytes`` (16 MiB) bounds what the agent may send in one response body, agent card, stream event
    or gRPC message; more raises ``A2AResponseTooLargeError`` (over HTTP the connection is closed).

    ``card_verifier``: called as ``card_verifier(card, received)`` on a card the client fetches (``received``: its
    JSON object exactly as sent), before the client uses it; a refusal (raising, or returning ``False``) fails
    ``connect`` with ``A2AInvalidCardError`` and nothing is sent to the agent. ``CardSignatureVerifier`` requires a
    valid JWS signature (a card given as ``card=`` is the caller's and is not checked):

    >>> from relaykit.client import CardSignatureVerifier
    >>> async def signed_only(public_pem: bytes):
    ...     verifier = CardSignatureVerifier(public_pem, algorithms=["ES256"])
    ...     async with Client("https://agent.example", card_verifier=verifier) as client:
    ...         return await client.ask("hello")

    ``allow_insecure_credentials`` (off): credentials (an ``Authorization``, ``Proxy-Authorization``, ``Cookie`` or
    ``X-API-Key`` header, an ``APIKeyAuth`` header or a card's API-key header, every header ``on_auth_required``
    returns in ``Credentials``, any header whose name holds token, api-key, apikey, secret, password, auth, session
    or credential, a URL's userinfo) are refused with
    ``A2AInsecureCredentialsError`` before they would go without TLS (``http://``, plaintext gRPC) to a host that is
    not loopback, on every binding and for the card request too. Loopback (``localhost``, ``127.0.0.1``, ``::1``)
    is never refused; set it for a plaintext agent on another host you accept to expose the credential to (a
    development network). A transport given as ``transport=`` is checked the same way from its ``url`` and
    ``secure`` attributes when it has them.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        card: AgentCard | None = None,
        transports: Sequence[str] = DEFAULT_TRANSPORTS,
        protocol_version: str | None = None,
        http: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        interceptors: Sequence[Interceptor] = (),
        extensions: Sequence[str] = (),
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        stream_timeout: float | None = None,
        retry: RetryPolicy = _DEFAULT_RETRY,
        resume: ResumePolicy = _DEFAULT_RESUME,
        on_input_required: InputHandler | None = None,
        on_auth_required: AuthHandler | None = None,
        input_timeout: float | None = None,
        max_turns: int = 20,
        transport: ClientTransport | None = None,
        tracer_provider: Any = None,
        ca_certs: str | None = None,
        client_cert: str | tuple[str, str] | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        card_verifier: CardVerifier | None = None,
        allow_insecure_credentials: bool = False,
    ) -> None:
        if url is None and card is None and transport is None:
            raise ValueError("give the agent's base URL, its card, or a transport")
        self.url = url
        self.card = card
        self.preferences = tuple(t.upper() for t in transports)
        # None: 1.0 where the card offers it, else 0.3. "1.0" / "0.3": only interfaces of that version (a dual-stack
        # agent spoken to as 0.3, to test what a 0.3 client sees).
        self.protocol_version = protocol_version
        self.headers = dict(headers or {})
        if extensions:
            self.headers["A2A-Extensions"] = ", ".join(extensions)
        self.interceptors = list(interceptors)
        self.retry = retry
        self.resume = resume
        self.on_input_required = on_input_required
        self.on_auth_required = on_auth_required
        self.input_timeout = input_timeout
        self.max_turns = max_turns
        self.interface: AgentInterface | None = None
        self._owns_http = http is None
        # TLS on every binding: the same CA bundle and client certificate for HTTP and for gRPC.
        self.ca_certs = ca_certs
        self.client_cert = client_cert
        # Long-running agents: no read timeout on streams unless asked; unary calls get ``timeout``.
        self._http = http or httpx.AsyncClient(
            verify=tls_verify(ca_certs, client_cert),
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
        )
        self._stream_timeout = httpx.Timeout(stream_timeout, connect=connect_timeout)
        self._timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.card_verifier = card_verifier
        self.allow_insecure_credentials = allow_insecure_credentials
        # None unless the connection is exposed (plaintext, not loopback) and not allowed: then ``_headers`` checks
        # every request's headers (``_plaintext``).
        self._guard: CredentialGuard | None = None
        # Lower-case names of the headers ``Credentials`` added (``ask()``): credentials whatever they are called.
        self._given_credentials: set[str] = set()
        self._transport = transport
        if transport is not None:
            self._guard = self._credential_guard(transport)
        # OpenTelemetry: a CLIENT span per call, its context injected, when an SDK is set up (or a provider given);
        # None otherwise, and then the calls pay nothing for it.
        self._tracer = client_tracer(tracer_provider)
        if self._tracer is not None and not any(isinstance(i, TraceContext) for i in self.interceptors):
            self.interceptors.append(TraceContext())

    # --- lifecycle ---------------------------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        try:
            await self.connect()
        except BaseException:
            # ``__aexit__`` does not run when ``__aenter__`` fails: a refused card, an unreachable agent or a refused
            # credential would leave the HTTP client (and its connection) open.
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"Client({redact_url(self.url or '')!r})"

    async def connect(self) -> None:
        """Resolve the card (if needed) and pick the transport."""
        if self._transport is not None:
            return
        card = await self.resolve_card()
        self.interface = choose_interface(card, self.preferences, self.protocol_version)
        transport = self._make_transport(self.interface)
        try:
            self._guard = self._credential_guard(transport)
            if self._guard is not None:
                self._guard.check(self.headers)  # the fixed headers: refused now, not at the first call
        except A2AError:
            await transport.aclose()  # a gRPC channel made for nothing
            raise
        self._transport = transport

    async def resolve_card(self) -> AgentCard:
        """The agent's card: the one given as ``card=``, else fetched from ``url`` and checked by ``card_verifier``
        (``connect`` does this first, then picks the transport; ``resolve_card`` alone picks none, so a card with
        no interface this client speaks can still be read)."""
        if self.card is None:
            assert self.url is not None
            target = card_url(self.url)
            exposed = guard(
                target,
                target[:8].lower() == "https://",
                self._credential_names(None),
                allowed=self.allow_insecure_credentials,
            )
            if exposed is not None:
                exposed.check(self.headers)
            resolver = CardResolver(self._http, max_bytes=self.max_response_bytes, verifier=self.card_verifier)
            self.card = await resolver.get(self.url, headers=self.headers)
        return self.card

    def _credential_names(self, card: AgentCard | None) -> set[str]:
        """Header names that carry a credential besides the usual ones (``_plaintext``): every ``APIKeyAuth``'s,
        the card's API-key ones, and every header an ``on_auth_required`` handler gave in ``Credentials``."""
        names: set[str] = set(self._given_credentials)
        names.update(i.header.lower() for i in self.interceptors if isinstance(i, APIKeyAuth))
        for scheme in card.security_schemes.values() if card is not None else ():
            api_key = scheme.api_key_security_scheme
            if api_key is not None and api_key.location.lower() == "header":
                names.add(api_key.name.lower())
        return names

    def _add_credentials(self, headers: Mapping[str, str]) -> None:
        """Send ``headers`` (a handler's ``Credentials``) on every later request. Each of them is a credential by
        definition, whatever its name (``X-Calendar-Key``, ``X-Jwt``, ``X-Signature``: names the word list of
        ``_plaintext`` does not catch): the guard is rebuilt with their names and the headers are checked now, so on
        an exposed connection ``A2AInsecureCredentialsError`` is raised before anything is sent, and the client's
        headers stay as they were."""
        names = {name.lower() for name in headers} - self._given_credentials
        if names:
            self._given_credentials |= names
            if self._transport is not None:
                self._guard = self._credential_guard(self._transport)
        if self._guard is not None:
            self._guard.check(headers)
        self.headers.update(headers)

    def _credential_guard(self, transport: ClientTransport) -> CredentialGuard | None:
        url = getattr(transport, "url", None)
        if not isinstance(url, str):
            return None  # a transport that names no URL: nothing to judge it by
        secure = bool(getattr(transport, "secure", True))
        return guard(url, secure, self._credential_names(self.card), allowed=self.allow_insecure_credentials)

    def _make_transport(self, interface: AgentInterface) -> ClientTransport:
        binding = interface.protocol_binding.upper()
        legacy = is_v03(interface.protocol_version)  # an A2A 0.3 interface: the same transports, via the codec
        # Bug fix: ``stream_timeout`` was computed and never used, so streams got the unary ``timeout`` as their read
        # timeout and a quiet long-running task (no event for ``timeout`` seconds) broke its stream.
        http_options: dict[str, Any] = {
            "tenant": interface.tenant,
            "stream_timeout": self._stream_timeout,
            "v03": legacy,
            "max_response_bytes": self.max_response_bytes,
        }
        if binding == "JSONRPC":
            return JSONRPCTransport(interface.url, self._http, **http_options)
        if binding == "HTTP+JSON":
            return RESTTransport(interface.url, self._http, **http_options)
        if binding == "GRPC" and grpc_available():
            module = importlib.import_module("relaykit.client._grpc")
            tls_material = self.ca_certs is not None or self.client_cert is not None
            secure = _grpc_tls(interface.url, self.url, tls_material=tls_material)
            transport: ClientTransport = module.GrpcTransport(
                interface.url,
                credentials=module.channel_credentials(self.ca_certs, self.client_cert) if secure else None,
                tenant=interface.tenant,
                timeout=self._timeout,
                stream_timeout=self._stream_timeout.read,
                v03=legacy,
                max_response_bytes=self.max_response_bytes,
            )
            return transport
        raise ValueError(f"unsupported binding {binding}")

    async def aclose(self) -> None:
        """Close the transport and the HTTP client this client made."""
        if self._transport is not None and not isinstance(self._transport, JSONRPCTransport | RESTTransport):
            await self._transport.aclose()
        if self._owns_http:
            await self._http.aclose()

    @property
    def transport(self) -> ClientTransport:
        """The transport in use (after ``connect``)."""
        if self._transport is None:
            raise RuntimeError("the client is not connected: use 'async with Client(...)' or await connect()")
        return self._transport

    async def _headers(self, op: str) -> dict[str, str]:
        out = dict(self.headers)
        for interceptor in self.interceptors:
            out.update(await interceptor.headers(op))
        if self._guard is not None:
            self._guard.check(out)
        return out

    # --- plumbing ----------------------------------------------------------------------------------------

    async def _call(
        self,
        name: str,
        request: A2AModel,
        *,
        idempotent: bool = True,
        after_retry: _Recovery | None = None,
        received: bool = False,
    ) -> Any:
        """One unary call, retried as the policy says; ``received``: ``(response, its JSON as received)``."""
        op = OPERATIONS_BY_NAME[name]
        if self._tracer is not None:
            with client_span(self._tracer, name, self._binding()):
                return await self._attempts(op, name, request, idempotent, after_retry, received)
        return await self._attempts(op, name, request, idempotent, after_retry, received)

    def _binding(self) -> str:
        interface = self.interface
        return interface.protocol_binding.lower() if interface is not None else "custom"

    async def _attempts(
        self,
        op: Operation,
        name: str,
        request: A2AModel,
        idempotent: bool,
        after_retry: _Recovery | None,
        received: bool = False,
    ) -> Any:
        attempt = 0
        while True:
            try:
                if received:
                    return await self._received(op, request, await self._headers(name))
                return await self.transport.call(op, request, headers=await self._headers(name))
            except A2AError as exc:
                if attempt and after_retry is not None:
                    # A retry's error may be the earlier attempt's success seen again (its answer was lost).
                    recovered = await after_retry(exc)
                    if recovered is not None:
                        return recovered
                attempt += 1
                if not (idempotent and retryable(exc)) or attempt >= self.retry.attempts:
                    raise
                await asyncio.sleep(self.retry.delay(attempt))

    async def _received(self, op: Operation, request: A2AModel, headers: dict[str, str]) -> tuple[Any, Any]:
        transport = self.transport
        call_received = getattr(transport, "call_received", None)
        if call_received is not None:
            result: tuple[Any, Any] = await call_received(op, request, headers=headers)
            return result
        # A transport of the caller's that cannot say what it received: the decoded response's JSON, which holds
        # every member the client reads (a signature that covered more fails: refused, never accepted unsigned).
        response = await transport.call(op, request, headers=headers)
        return response, response.to_dict() if isinstance(response, A2AModel) else response

    def _stream(self, name: str, request: A2AModel, last_event_id: str | None = None) -> AsyncIterator[StreamEvent]:
        op = OPERATIONS_BY_NAME[name]
        return self._stream_with_headers(op, request, last_event_id)

    async def _stream_with_headers(
        self, op: Operation, request: A2AModel, last_event_id: str | None
    ) -> AsyncIterator[StreamEvent]:
        span = None
        if self._tracer is not None:
            # Current only while the headers are made (a generator must not leave its span current for its caller).
            span = start_client_span(self._tracer, op.name, self._binding())
            with span_current(span):
                headers = await self._headers(op.name)
        else:
            headers = await self._headers(op.name)
        stream = self.transport.stream(op, request, headers=headers, last_event_id=last_event_id)
        try:
            async for item in stream:
                yield item
        finally:
            await aclose_stream(stream)  # close the transport's stream with this one, not at garbage collection
            if span is not None:
                span.end()

    @staticmethod
    def _message(message: Message | str | Part | list[Part], task_id: str | None, context_id: str | None) -> Message:
        if isinstance(message, Message):
            update: dict[str, Any] = {}
            if task_id and not message.task_id:
                update["task_id"] = task_id
            if context_id and not message.context_id:
                update["context_id"] = context_id
            return message.model_copy(update=update) if update else message
        return Message.user(message, task_id=task_id or "", context_id=context_id or "")

    # --- operations --------------------------------------------------------------------------------------

    async def send(
        self,
        message: Message | str | Part | list[Part],
        *,
        task_id: str | None = None,
        context_id: str | None = None,
        return_immediately: bool = False,
        history_length: int | None = None,
        accepted_output_modes: Sequence[str] = (),
        push: TaskPushNotificationConfig | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Task | Message:
        """SendMessage: blocking (the task terminal or interrupted) unless ``return_immediately``."""
        request = SendMessageRequest(
            message=self._message(message, task_id, context_id),
            configuration=SendMessageConfiguration(
                accepted_output_modes=list(accepted_output_modes),
                task_push_notification_config=push,
                history_length=history_length,
                return_immediately=return_immediately,
            ),
            metadata=metadata,
        )
        response: SendMessageResponse = await self._call("SendMessage", request, idempotent=self.retry.retry_send)
        return response.payload

    async def stream(
        self,
        message: Message | str | Part | list[Part],
        *,
        task_id: str | None = None,
        context_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> AsyncIterator[Event]:
        """SendStreamingMessage: every event once, in order, across reconnections, until terminal/interrupted."""
        request = SendMessageRequest(message=self._message(message, task_id, context_id), metadata=metadata)
        events = resume_stream(
            self,
            self._stream("SendStreamingMessage", request),
            stop_at_interrupt=True,
            continuing=bool(request.message.task_id),
        )
        try:
            async for event in events:
                yield event
        finally:
            await aclose_stream(events)

    async def subscribe(self, task_id: str) -> AsyncIterator[Event]:
        """SubscribeToTask: the task snapshot first, then every event until the task is terminal."""
        source = self._stream("SubscribeToTask", SubscribeToTaskRequest(id=task_id))
        events = resume_stream(self, source, stop_at_interrupt=False, task_id=task_id)
        try:
            async for event in events:
                yield event
        finally:
            await aclose_stream(events)

    async def get_task(self, task_id: str, *, history_length: int | None = None) -> Task:
        """GetTask."""
        task: Task = await self._call("GetTask", GetTaskRequest(id=task_id, history_length=history_length))
        return task

    async def list_task_pages(
        self,
        *,
        context_id: str = "",
        state: TaskState | None = None,
        page_size: int | None = None,
        history_length: int | None = None,
        include_artifacts: bool | None = None,
        page_token: str = "",
    ) -> AsyncIterator[ListTasksResponse]:
        """ListTasks, one page at a time, following ``nextPageToken`` to the end (from ``page_token``, if given); a
        token the server already gave ends the listing (a broken server repeating one would page for ever)."""
        token = page_token
        seen = {token}
        while True:
            request = ListTasksRequest(
                context_id=context_id,
                status=state or TaskState.UNSPECIFIED,
                page_size=page_size,
                page_token=token,
                history_length=history_length,
                include_artifacts=include_artifacts,
            )
            page: ListTasksResponse = await self._call("ListTasks", request)
            yield page
            token = page.next_page_token
            if not token or token in seen:
                return
            seen.add(token)

    async def list_tasks(self, **filters: Any) -> AsyncIterator[Task]:
        """ListTasks as one iterator of tasks (filters as in ``list_task_pages``)."""
        async for page in self.list_task_pages(**filters):
            for task in page.tasks:
                yield task

    async def cancel(self, task_id: str, *, metadata: dict[str, Any] | None = None) -> Task:
        """CancelTask (retried like the other idempotent calls; a retry refused because the task is already CANCELED
        returns that task: the earlier attempt canceled it and only its answer was lost)."""

        async def canceled_meanwhile(exc: A2AError) -> Task | None:
            if not isinstance(exc, TaskNotCancelableError):
                return None
            # Digest §9 #16: a repeated cancel of a canceled task is TaskNotCancelable. Only a CANCELED task is taken
            # as our success: one that COMPLETED or FAILED meanwhile was not canceled, and the error stands.
            try:
                task = await self.get_task(task_id)
            except A2AError:
                return None
            return task if task.status.state is TaskState.CANCELED else None

        request = CancelTaskRequest(id=task_id, metadata=metadata)
        task: Task = await self._call("CancelTask", request, after_retry=canceled_meanwhile)
        return task

    async def create_push_config(
        self,
        task_id: str,
        url: str,
        *,
        token: str = "",
        authentication: AuthenticationInfo | None = None,
        config_id: str = "",
    ) -> TaskPushNotificationConfig:
        """CreateTaskPushNotificationConfig (the server assigns an id when none is given)."""
        config = TaskPushNotificationConfig(
            task_id=task_id, url=url, token=token, authentication=authentication, id=config_id
        )
        created: TaskPushNotificationConfig = await self._call(
            "CreateTaskPushNotificationConfig", config, idempotent=bool(config_id)
        )
        return created

    async def get_push_config(self, task_id: str, config_id: str) -> TaskPushNotificationConfig:
        """GetTaskPushNotificationConfig."""
        request = GetTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)
        config: TaskPushNotificationConfig = await self._call("GetTaskPushNotificationConfig", request)
        return config

    async def list_push_configs(self, task_id: str) -> list[TaskPushNotificationConfig]:
        """ListTaskPushNotificationConfigs (all pages; a token the server already gave ends the listing, so a broken
        server repeating one cannot keep the client paging for ever)."""
        configs: list[TaskPushNotificationConfig] = []
        token = ""
        seen = {token}
        while True:
            request = ListTaskPushNotificationConfigsRequest(task_id=task_id, page_token=token)
            page = await self._call("ListTaskPushNotificationConfigs", request)
            configs.extend(page.configs)
            token = page.next_page_token
            if not token or token in seen:
                return configs
            seen.add(token)

    async def delete_push_config(self, task_id: str, config_id: str) -> None:
        """DeleteTaskPushNotificationConfig (idempotent)."""
        await self._call(
            "DeleteTaskPushNotificationConfig", DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)
        )

    async def extended_card(self) -> AgentCard:
        """GetExtendedAgentCard; the client uses the extended card from then on (same interfaces).

        With a ``card_verifier``, the card is verified first, on its JSON as received (over gRPC: the protobuf
        message received, as ProtoJSON in the spec's canonical form, REQUIRED fields kept even when empty), as the
        public card is; a refusal raises ``A2AInvalidCardError`` and the client keeps the card it had. (A card
        given as ``card=`` is the caller's; an extended card always comes from the agent, so it is always checked.)
        """
        request = GetExtendedAgentCardRequest()
        if self.card_verifier is None:
            card: AgentCard = await self._call("GetExtendedAgentCard", request)
        else:
            card, received = await self._call("GetExtendedAgentCard", request, received=True)
            where = self.interface.url if self.interface is not None else getattr(self._transport, "url", self.url)
            await run_verifier(self.card_verifier, card, received, str(where or ""), what="the extended agent card")
        self.card = card
        return card

    # --- conveniences ------------------------------------------------------------------------------------

    async def ask(self, text: str | Message, *, context_id: str | None = None, task_id: str | None = None) -> str:
        """Send ``text`` and return the answer's text, following a multi-turn task to its end.

        A task the reply leaves SUBMITTED or WORKING (a server's send timeout passed first) is followed to its next
        stop: subscribed to when the card says the agent streams, else polled with GetTask (backing off as
        ``resume`` says, up to its ``max_backoff``). INPUT_REQUIRED is answered by ``on_input_required(task)``;
        AUTH_REQUIRED is resolved by ``on_auth_required(task)``, which returns a reply, ``Credentials`` (headers
        for every later request, and the follow-up that carries them; refused in clear like any credential), or
        ``None`` to wait while the credential arrives out of band (the task is followed until it moves on by
        itself: subscribed to, or polled when the agent does not stream or closes the subscription while the task
        waits). Handlers may be sync or async; ``input_timeout`` bounds each wait for a person (an async handler's
        call, an out-of-band wait); at most ``max_turns`` handler calls in all. FAILED, REJECTED and an unresolved
        AUTH_REQUIRED / INPUT_REQUIRED raise the matching ``A2ATask…Error``.

        >>> from relaykit.client import Client, Credentials
        >>> async def main(token: str):
        ...     sign_in = lambda task: Credentials({"X-Calendar-Token": token}, message="signed in")
        ...     async with Client("http://localhost:8000", on_auth_required=sign_in) as client:
        ...         return await client.ask("what is on my calendar?")
        """
        result = await self.send(text, context_id=context_id, task_id=task_id)
        turns = 0
        while True:
            if isinstance(result, Message):
                return result.text
            task = await self._settle(result)
            state = task.status.state
            if state is TaskState.INPUT_REQUIRED and self.on_input_required is not None:
                # ``max_turns`` counts the handlers' answers: the reply to the last one is still looked at.
                if turns >= self.max_turns:
                    raise A2ATaskInputRequiredError(task, f"no final answer after {self.max_turns} turns")
                turns += 1
                answer: Message | str = await call_handler(self.on_input_required, task, self.input_timeout)
                result = await self.send(answer, task_id=task.id, context_id=task.context_id)
                continue
            if state is TaskState.AUTH_REQUIRED and self.on_auth_required is not None:
                if turns >= self.max_turns:
                    raise A2ATaskAuthRequiredError(task, f"no final answer after {self.max_turns} turns")
                turns += 1
                reply: AuthReply = await call_handler(self.on_auth_required, task, self.input_timeout)
                if isinstance(reply, Credentials):
                    self._add_credentials(reply.headers)
                    reply = reply.message
                elif reply is not None and not isinstance(reply, Message | str):
                    # A bare mapping of headers is the likely mistake: say what to return, and send nothing.
                    raise TypeError(
                        f"on_auth_required returned {type(reply).__name__}: return a reply (Message or str), "
                        "Credentials(headers, message=...), or None to wait while the credential arrives out of band"
                    )
                if reply is None:
                    # Out of band (digest §7.4): the agent resumes the task when the credential reaches it.
                    result = await self._wait_out_of_band(task)
                    continue
                result = await self.send(reply, task_id=task.id, context_id=task.context_id)
                continue
            return _outcome_text(task)

    async def _wait_out_of_band(self, task: Task) -> Task:
        """``task`` (interrupted) at its next stop after the status it is in, which it is to leave by itself (a
        credential given out of band), within ``input_timeout`` (``_interrupts``); past it, the task's
        ``A2ATaskAuthRequiredError``."""
        if self.input_timeout is None:
            return await self._settle(task, waiting=task.status)
        bound = asyncio.timeout(self.input_timeout)
        try:
            async with bound:
                return await self._settle(task, waiting=task.status)
        except TimeoutError:
            if not bound.expired():
                raise  # not this bound's: a timeout of its own from below
            raise A2ATaskAuthRequiredError(
                task, f"task {task.id} did not move on within input_timeout ({self.input_timeout:g} s)"
            ) from None

    async def _settle(self, task: Task, *, waiting: TaskStatus | None = None) -> Task:
        """``task`` at its next stop (terminal or interrupted): a blocking SendMessage may answer before that (a
        server's send timeout), and that reply is not the answer. ``waiting``: the interrupted status the task is
        in, which it is to leave by itself (a credential given out of band); its next stop after that one."""
        if waiting is None and task.status.state not in ACTIVE:
            return task
        capabilities = self.card.capabilities if self.card is not None else None
        if capabilities is not None and capabilities.streaming:
            try:
                task = await self._watch(task, waiting)
            except (UnsupportedOperationError, InvalidParamsError) as exc:
                # A task that ended meanwhile takes no subscription (0.3 servers say InvalidParams): read it.
                if isinstance(exc, InvalidParamsError) and not getattr(self._transport, "v03", False):
                    raise
                task = await self.get_task(task.id)
            except A2AReconnectError:
                # Waiting out of band may take minutes (a person signs in): a subscription that could not be kept
                # (resubscriptions refused, or answered with the status waited out and closed) is no reason to give
                # up on the task. Polling below follows it instead.
                if waiting is None:
                    raise
                task = await self.get_task(task.id)
        polls = 0
        while task.status.state in ACTIVE or (waiting is not None and same_status(task.status, waiting)):
            # The count stops growing once the backoff has reached its cap (2**n of a long task's poll count would
            # overflow a float).
            polls = min(polls + 1, 32)
            await asyncio.sleep(self.resume.delay(polls))
            task = await self.get_task(task.id)
        return task

    async def _watch(self, task: Task, waiting: TaskStatus | None = None) -> Task:
        """Follow ``task`` by SubscribeToTask (resumed like any stream) until it is terminal or interrupted (in
        another status than ``waiting``), or until the server ends the subscription with the task still in
        ``waiting`` (``resume_stream``: then the task as it is, and the caller polls)."""
        source = self._stream("SubscribeToTask", SubscribeToTaskRequest(id=task.id))
        events = resume_stream(self, source, stop_at_interrupt=True, task_id=task.id, known=waiting)
        try:
            async for event in events:
                if isinstance(event, Task):
                    task = event
                elif not isinstance(event, Message):  # a message is not a task event: nothing to fold
                    task = apply(task, event)
        finally:
            await aclose_stream(events)
        return task


def _grpc_tls(interface_url: str, card_url: str | None, *, tls_material: bool) -> bool:
    """Whether the gRPC channel to ``interface_url`` uses TLS.

    The interface's own scheme decides when it has one (``grpcs://`` / ``https://``: TLS; ``grpc://`` / ``http://``:
    plaintext). The spec's bare ``host:port`` gets TLS when the client was given TLS material or found the card over
    HTTPS (an agent serving HTTPS serves its gRPC port with the same certificate). Schemes are case-insensitive: a
    card URL spelled ``HTTPS://`` used to give a plaintext channel, credentials included.
    """
    scheme, sep, _ = interface_url.partition("://")
    if sep:
        return scheme.lower() in ("grpcs", "https")
    return tls_material or (card_url or "").lower().startswith("https://")


def _outcome_text(task: Task) -> str:
    state = task.status.state
    if state is TaskState.FAILED:
        raise A2ATaskFailedError(task)
    if state is TaskState.REJECTED:
        raise A2ATaskRejectedError(task)
    if state is TaskState.AUTH_REQUIRED:
        raise A2ATaskAuthRequiredError(task)
    if state is TaskState.INPUT_REQUIRED:
        raise A2ATaskInputRequiredError(task)
    texts = [a.text_content for a in task.artifacts if a.text_content]
    if texts:
        return "\n".join(texts)
    return task.status.message.text if task.status.message is not None else ""
