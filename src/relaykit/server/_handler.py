"""``RequestHandler``: one coroutine per A2A operation, over the engine and the stores.

Every business rule a binding might be tempted to repeat lives here and raises core errors: capability checks
(streaming, push, extended card; digest §5.11), required extensions, the media types a message's parts may have
(``server._modes``), history trimming (§5.6), ListTasks shaping (§5.7), push-config scoping. Bindings only decode,
call the method the operation table names, and encode.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from relaykit._card import AgentCard
from relaykit._enums import TaskState
from relaykit._errors import (
    ExtendedAgentCardNotConfiguredError,
    ExtensionSupportRequiredError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from relaykit._ids import inline_config_id, new_id
from relaykit._model import A2AModel, Encoded, set_field
from relaykit._requests import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from relaykit._types import Message, SendMessageResponse, Task, TaskPushNotificationConfig, stream_json
from relaykit.auth._gate import Auth
from relaykit.backends._base import PageTokenError, PushConfigStore, TaskQuery
from relaykit.backends.memory import MemoryPushConfigStore
from relaykit.server._context import CallContext
from relaykit.server._engine import StreamItem, TaskEngine
from relaykit.server._modes import InputModes
from relaykit.server._quotas import QuotaLedger, Quotas, QuotaStore, exhausted
from relaykit.telemetry._seam import Telemetry

__all__ = ["ExtendedCardProvider", "RequestHandler", "trim_history"]

ExtendedCardProvider = AgentCard | Callable[[CallContext], Awaitable[AgentCard]]

# What a push config's token, scheme and credentials must be to go out as header values: an RFC 9110 field-value
# in ASCII (httpx encodes header values as ASCII; h11 under it refuses control characters, CR/LF included, and
# whitespace at either end). Anything else fails every delivery attempt, so it is refused when the config is stored.
_FIELD_VALUE = re.compile(r"[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*")
_NOT_A_FIELD_VALUE = "not a valid HTTP header value: only visible ASCII characters, with spaces or tabs between them"


def _webhook_url_problem(url: str) -> str | None:
    """Why httpx could not POST to ``url`` (the SSRF guard's own rules come after), or ``None``."""
    try:
        parsed = httpx.URL(url)
        host, port = parsed.host, parsed.port  # (the host is IDNA-decoded on first use: it may raise too)
    except (httpx.InvalidURL, ValueError) as exc:  # (an IDNA error is a ValueError, not an InvalidURL)
        return f"not a valid URL ({exc})"
    if parsed.scheme not in ("http", "https"):
        return f"the scheme must be http or https (got {parsed.scheme or 'none'!r})"
    if not host:
        return "the URL has no host"
    if port is not None and not 0 < port < 65536:
        return "its port is out of range"
    return None


def trim_history(task: Task, history_length: int | None) -> Task:
    """Apply ``historyLength``: unset keeps all, 0 drops the history, N keeps the N most recent messages."""
    if history_length is None or len(task.history) <= history_length:
        return task
    task.history = task.history[len(task.history) - history_length :] if history_length else []
    return task


class _HistoryTrimmed:
    """A send's stream with ``historyLength`` applied to each Task snapshot in it (spec §5.6: never more messages
    than asked for), the rest passed through as it is. Wrapped only when the request sets it, so a stream without
    one pays nothing.

    A snapshot's object may be shared with other readers of the task's log, so it is copied, never trimmed in place.
    A class, not an async generator, so the writers still see ``pending()`` (as ``server._quotas._Counted``); a
    request that also carries an inline push config is wrapped again by ``_bind_push_on_first``, a generator, and its
    writer then batches less (correct, only slower, and only for that rare combination)."""

    __slots__ = ("_items", "_length")

    def __init__(self, items: AsyncIterator[StreamItem], length: int) -> None:
        self._items = items
        self._length = length

    def __aiter__(self) -> _HistoryTrimmed:
        return self

    async def __anext__(self) -> StreamItem:
        item = await self._items.__anext__()
        task = item[1]
        length = self._length
        if type(task) is not Task or len(task.history) <= length:
            return item
        kept = task.history[len(task.history) - length :] if length else []
        trimmed = task.model_copy(update={"history": kept})
        return (item[0], trimmed, stream_json(trimmed))

    def pending(self) -> int:
        pending = getattr(self._items, "pending", None)
        return int(pending()) if pending is not None else 0

    async def aclose(self) -> None:
        close = getattr(self._items, "aclose", None)
        if close is not None:
            await close()


class RequestHandler:
    """The operations of A2A 1.0 over a ``TaskEngine``.

    >>> # handler = RequestHandler(engine, card)
    >>> # result = await handler.send_message(SendMessageRequest(message=Message.user("hi")), CallContext())
    """

    def __init__(
        self,
        engine: TaskEngine,
        card: AgentCard,
        *,
        push_store: PushConfigStore | None = None,
        extended_card: ExtendedCardProvider | None = None,
        auth: Auth | None = None,
        quotas: Quotas | None = None,
        shared_quotas: QuotaStore | None = None,
    ) -> None:
        self.engine = engine
        # Who may call: every binding authenticates and authorizes through this one object (relaykit.auth).
        self.auth = auth if auth is not None else Auth()
        # Per-principal quotas (server._quotas): requests per second and open streams here, executions and queued
        # messages in the runner (or, shared by replicas, where the scale-out front accepts a message).
        self.quotas = QuotaLedger(quotas, shared_quotas)
        self.quotas.bind(engine)
        self.card = card
        self.push_store: PushConfigStore = push_store if push_store is not None else MemoryPushConfigStore()
        self.extended_card = extended_card
        # Webhook URL check (the push SSRF guard), awaited as check(url, field) before a config is stored;
        # raises InvalidParamsError. Set by create_app when push is on.
        self.push_url_check: Callable[[str, str], Awaitable[None]] | None = None
        # Observability (relaykit.telemetry): None = off, and then nothing here costs anything.
        self.telemetry: Telemetry | None = None
        caps = card.capabilities
        self.streaming = bool(caps.streaming)
        self.push = bool(caps.push_notifications)
        self.extended = bool(caps.extended_agent_card)
        self.supported_extensions = frozenset(ext.uri for ext in caps.extensions if ext.uri)
        self.required_extensions = frozenset(ext.uri for ext in caps.extensions if ext.required and ext.uri)
        # The media types a message's parts may have, compiled once from the cards; None (nothing declared on the
        # public card, or everything accepted) costs the sends nothing but this attribute's test. An extended card
        # given by a provider function is not known until a call, so only a fixed one adds its modes.
        fixed = extended_card if isinstance(extended_card, AgentCard) else None
        self.input_modes: InputModes | None = InputModes.of(card, fixed)

    # --- per-request checks ------------------------------------------------------------------------------

    def negotiate_extensions(self, call: CallContext, header: str = "A2A-Extensions") -> None:
        """Raise for a required extension the client did not activate; record the activated ones.

        ``header``: the name the caller's protocol version gives the extensions header (0.3: ``X-A2A-Extensions``),
        so the error tells the caller what to send.
        """
        if not self.required_extensions and not call.requested_extensions:
            return  # the common case: nothing required, nothing asked for
        missing = self.required_extensions - call.requested_extensions
        if missing:
            raise ExtensionSupportRequiredError(
                "this agent requires extension(s) " + ", ".join(sorted(missing)) + f"; activate them with the {header} "
                "header",
                extensions=",".join(sorted(missing)),
            )
        if call.requested_extensions:
            call.activated_extensions.update(call.requested_extensions & self.supported_extensions)

    def _require_streaming(self) -> None:
        if not self.streaming:
            raise UnsupportedOperationError("streaming is not enabled on this agent (capabilities.streaming)")

    def _require_push(self) -> None:
        if not self.push:
            raise PushNotificationNotSupportedError()

    async def _check_inline_push(self, request: SendMessageRequest, call: CallContext) -> None:
        config = request.configuration.task_push_notification_config if request.configuration else None
        if config is None:
            return
        self._require_push()
        message = request.message
        tenant = request.tenant or call.tenant
        if message.task_id:
            # A follow-up: its task must be the caller's before anything is done for its config (a DNS lookup of the
            # webhook host above all), as CreateTaskPushNotificationConfig checks it first. Someone else's task or
            # none answers TaskNotFound, and the server resolves no name for it.
            await self._visible_task(message.task_id, tenant, call)
        await self._check_push_config(config, "configuration.taskPushNotificationConfig.")
        if message.task_id:
            # A follow-up's config joins the configs its task has (each message without a config id adds one): the
            # cap CreateTaskPushNotificationConfig keeps holds for it too, checked before the message runs.
            legacy = bool(config.protocol_version)
            config_id = inline_config_id(config.id, message.task_id, message.message_id, legacy=legacy)
            await self._check_push_cap(message.task_id, config_id, tenant, call)

    async def _check_push_config(self, config: TaskPushNotificationConfig, where: str) -> None:
        """What a push config must be before it is stored, whichever binding or operation carried it (``where``:
        the prefix of its field paths in errors): REQUIRED fields set, a URL httpx can POST to, a token, scheme and
        credentials that can be sent as header values, an id every binding can address, a URL the SSRF guard lets
        through."""
        if not config.url:
            raise InvalidParamsError(f"{where}url is required", field_violations=[(f"{where}url", "required")])
        problem = _webhook_url_problem(config.url)
        if problem is not None:
            field = f"{where}url"
            raise InvalidParamsError(f"{field} cannot be used: {problem}", field_violations=[(field, problem)])
        # A REQUIRED string is refused empty as well as absent: proto3 cannot tell the two apart (the gRPC binding
        # decodes "" as absent), so the JSON bindings must not accept what gRPC refuses.
        if config.authentication is not None and not config.authentication.scheme:
            field = f"{where}authentication.scheme"
            raise InvalidParamsError(
                f"{field} is required when authentication is given (e.g. Bearer)",
                field_violations=[(field, "required")],
            )
        self._check_header_values(config, where)
        # Client-chosen ids: the HTTP+JSON routes take any character in an id, percent-encoded (the REST binding
        # matches on the path as sent). Only "." and ".." cannot be a path segment: clients remove them as dot
        # segments (RFC 3986 §5.2.4) before sending, so such a config could be created but never fetched or
        # deleted over HTTP+JSON. Refused here, on every binding, since every binding must offer the same operations.
        if config.id in (".", ".."):
            field = f"{where}id"
            raise InvalidParamsError(
                f'{field} {config.id!r} cannot be used: "." and ".." are not addressable as a URL path segment',
                field_violations=[(field, 'must not be "." or ".."')],
            )
        if self.push_url_check is not None:
            await self.push_url_check(config.url, f"{where}url")

    @staticmethod
    def _check_header_values(config: TaskPushNotificationConfig, where: str) -> None:
        """The fields every delivery sends as header values; the error names the field, never its value (a
        credential)."""
        auth = config.authentication
        for name, value in (
            ("token", config.token),
            ("authentication.scheme", auth.scheme if auth is not None else ""),
            ("authentication.credentials", auth.credentials if auth is not None else ""),
        ):
            if value and _FIELD_VALUE.fullmatch(value) is None:
                field = f"{where}{name}"
                raise InvalidParamsError(
                    f"{field} is {_NOT_A_FIELD_VALUE}", field_violations=[(field, _NOT_A_FIELD_VALUE)]
                )

    async def _check_push_cap(self, task_id: str, config_id: str, tenant: str, call: CallContext) -> None:
        """``Quotas.push_configs``: a task holds at most that many configs; storing one more (``config_id`` new to
        the task, or empty: the server assigns one) is refused, replacing one of them is not."""
        cap = self.quotas.quotas.push_configs
        if cap > 0:
            existing = await self.push_store.list(task_id, tenant=tenant, owner=call.user)
            if len(existing) >= cap and all(c.id != config_id for c in existing):
                raise exhausted(f"task {task_id} already has {cap} push notification configs", 60)

    # --- messages ----------------------------------------------------------------------------------------

    async def send_message(self, request: SendMessageRequest, call: CallContext) -> SendMessageResponse | Encoded:
        """SendMessage."""
        if self.input_modes is not None:
            self.input_modes.check(request.message.parts)  # before anything is stored, follow-ups included
        config = request.configuration
        if config is not None and config.task_push_notification_config is not None:
            await self._check_inline_push(request, call)
        result = await self.engine.send_raw(request, call)
        # (The common answer is bytes: a type test first spares an isinstance against a model class that fails.)
        if type(result) is not bytes and isinstance(result, Message):
            return SendMessageResponse(message=result)
        history_length = config.history_length if config else None
        if history_length is None and (config is None or config.task_push_notification_config is None):
            # The common case: relay the task exactly as persisted, without decoding and re-encoding it.
            return Encoded(b'{"task":' + result + b"}")
        task = Task.model_validate_json(result)
        await self._bind_inline_push(request, task, call)
        return SendMessageResponse(task=trim_history(task, history_length))

    async def send_streaming_message(self, request: SendMessageRequest, call: CallContext) -> AsyncIterator[StreamItem]:
        """SendStreamingMessage: (seq, event, encoded StreamResponse) items."""
        self._require_streaming()
        if self.input_modes is not None:
            self.input_modes.check(request.message.parts)
        await self._check_inline_push(request, call)
        hold = await self.quotas.open_stream(call.user)
        items: AsyncIterator[StreamItem] = self.engine.stream(request, call)
        config = request.configuration
        if config is not None:
            if config.history_length is not None:
                # As the blocking answer is trimmed (``send_message``): the stream's Task snapshots too.
                items = _HistoryTrimmed(items, config.history_length)
            if config.task_push_notification_config is not None:
                items = self._bind_push_on_first(request, items, call)
        return self.quotas.stream(call.user, hold, items) if hold is not None else items

    async def _bind_push_on_first(
        self, request: SendMessageRequest, items: AsyncIterator[StreamItem], call: CallContext
    ) -> AsyncIterator[StreamItem]:
        first = True
        async for item in items:
            if first and isinstance(item[1], Task):
                await self._bind_inline_push(request, item[1], call)
            first = False
            yield item

    async def _bind_inline_push(self, request: SendMessageRequest, task: Task, call: CallContext) -> None:
        config = request.configuration.task_push_notification_config if request.configuration else None
        if config is None or config.task_id == task.id:
            # None, or bound already by the push hook, which sets the task id on this very object in one process. In
            # queue mode a follow-up's config may name its task from the start: the worker's hook stores that one.
            return
        self._require_push()
        config_id = inline_config_id(
            config.id, task.id, request.message.message_id, legacy=bool(config.protocol_version)
        )
        # The task's tenant, as the push hook binds it (``PushSender.on_event``: the execution's tenant): in scale-out
        # the worker that runs the message binds the config too, and the store keys a config by its tenant, so the
        # tenant as sent (empty when the path named it) would make a second config under another tenant.
        tenant = request.tenant or call.tenant
        bound = config.model_copy(update={"task_id": task.id, "id": config_id, "tenant": tenant})
        await self.push_store.put(bound, owner=call.user)

    # --- tasks -------------------------------------------------------------------------------------------

    async def get_task(self, request: GetTaskRequest, call: CallContext) -> Task:
        """GetTask, with ``historyLength`` applied."""
        task = await self.engine.get_task(request.id, call, tenant=request.tenant)
        return trim_history(task, request.history_length)

    async def list_tasks(self, request: ListTasksRequest, call: CallContext) -> ListTasksResponse:
        """ListTasks: the caller's tasks, newest status first, cursor-paginated."""
        page_size = request.page_size if request.page_size is not None else 50
        query = TaskQuery(
            tenant=request.tenant or call.tenant,
            owner=call.user,
            context_id=request.context_id,
            state=None if request.status is TaskState.UNSPECIFIED else request.status,
            status_after=request.status_timestamp_after,
            page_size=page_size,
            page_token=request.page_token,
            history_length=request.history_length,
            include_artifacts=bool(request.include_artifacts),
        )
        try:
            page = await self.engine.store.list(query)
        except PageTokenError as exc:
            raise InvalidParamsError(
                str(exc), field_violations=[("pageToken", "not a token from this server")]
            ) from exc
        # relaykit's stores trimmed history and artifacts before decoding (TaskQuery.history_length /
        # include_artifacts); trimming again is a no-op for them and keeps a store that ignores those fields right.
        tasks = page.tasks
        for task in tasks:
            if not request.include_artifacts:
                task.artifacts = []
            trim_history(task, request.history_length)
        response = ListTasksResponse(
            tasks=tasks, next_page_token=page.next_page_token, page_size=page_size, total_size=page.total_size
        )
        if request.include_artifacts:  # every task's artifacts emitted, [] when it has none (spec §3.1.4)
            set_field(response, "artifacts_included", True)
        return response

    async def cancel_task(self, request: CancelTaskRequest, call: CallContext) -> Task:
        """CancelTask: answers once CANCELED is persisted."""
        return await self.engine.cancel(request.id, call, tenant=request.tenant)

    async def subscribe_to_task(
        self, request: SubscribeToTaskRequest, call: CallContext, last_event_id: int | None = None
    ) -> AsyncIterator[StreamItem]:
        """SubscribeToTask: snapshot first (or the events after ``last_event_id``), then until terminal."""
        self._require_streaming()
        await self.quotas.charge(call.user)  # bindings call this directly, not through dispatch
        hold = await self.quotas.open_stream(call.user)
        try:
            items = await self.engine.subscribe(request.id, call, tenant=request.tenant, last_event_id=last_event_id)
        except BaseException:
            if hold is not None:
                await self.quotas.close_stream(call.user, hold)
            raise
        if hold is not None:
            items = self.quotas.stream(call.user, hold, items)
        if self.telemetry is not None:
            return self.telemetry.watch(items, operation="SubscribeToTask")
        return items

    # --- push configs ------------------------------------------------------------------------------------

    async def _push_scope(self, tenant: str, task_id: str, call: CallContext) -> str:
        """Every push-config operation's preamble: push enabled, the task visible to the caller; the tenant to use."""
        self._require_push()
        tenant = tenant or call.tenant
        await self._visible_task(task_id, tenant, call)
        return tenant

    async def _visible_task(self, task_id: str, tenant: str, call: CallContext) -> None:
        if not task_id:
            raise InvalidParamsError("taskId is required", field_violations=[("taskId", "required")])
        await self.engine.get_task(task_id, call, tenant=tenant)

    async def create_push_config(
        self, request: TaskPushNotificationConfig, call: CallContext
    ) -> TaskPushNotificationConfig:
        """CreateTaskPushNotificationConfig: the server assigns an id when none is given."""
        tenant = await self._push_scope(request.tenant, request.task_id, call)
        await self._check_push_config(request, "")
        await self._check_push_cap(request.task_id, request.id, tenant, call)
        config = request.model_copy(update={"id": request.id or new_id(), "tenant": tenant})
        await self.push_store.put(config, owner=call.user)
        return config

    async def get_push_config(
        self, request: GetTaskPushNotificationConfigRequest, call: CallContext
    ) -> TaskPushNotificationConfig:
        """GetTaskPushNotificationConfig; a missing config answers TaskNotFoundError (spec §5.10).

        An A2A 0.3 get that names only the task (0.3's ``TaskIdParams`` form, ``id`` empty) answers the task's config
        whose id is the task id (the id 0.3 gives a config registered without one), else its oldest, as 0.3 servers
        answered it; a 1.0 request always names its config.
        """
        tenant = await self._push_scope(request.tenant, request.task_id, call)
        if not request.id and request.protocol_version:
            config = await self.push_store.get(request.task_id, request.task_id, tenant=tenant, owner=call.user)
            if config is None:
                configs = await self.push_store.list(request.task_id, tenant=tenant, owner=call.user)
                config = configs[0] if configs else None
        else:
            config = await self.push_store.get(request.task_id, request.id, tenant=tenant, owner=call.user)
        if config is None:
            named = f"push notification config {request.id!r}" if request.id else "push notification config"
            raise TaskNotFoundError(
                f"no {named} for task {request.task_id}", task_id=request.task_id, config_id=request.id
            )
        return config

    async def list_push_configs(
        self, request: ListTaskPushNotificationConfigsRequest, call: CallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        """ListTaskPushNotificationConfigs (one page: a task has few configs)."""
        tenant = await self._push_scope(request.tenant, request.task_id, call)
        configs = await self.push_store.list(request.task_id, tenant=tenant, owner=call.user)
        return ListTaskPushNotificationConfigsResponse(configs=configs)

    async def delete_push_config(self, request: DeleteTaskPushNotificationConfigRequest, call: CallContext) -> None:
        """DeleteTaskPushNotificationConfig: idempotent."""
        tenant = await self._push_scope(request.tenant, request.task_id, call)
        await self.push_store.delete(request.task_id, request.id, tenant=tenant, owner=call.user)

    # --- cards -------------------------------------------------------------------------------------------

    async def get_extended_card(self, request: GetExtendedAgentCardRequest, call: CallContext) -> AgentCard:
        """GetExtendedAgentCard: only for an authenticated caller (spec §5.13), on every binding."""
        if not self.extended:
            raise UnsupportedOperationError("this agent has no extended card (capabilities.extendedAgentCard)")
        provider = self.extended_card
        if provider is None:
            raise ExtendedAgentCardNotConfiguredError()
        if not call.authenticated:
            raise self.auth.unauthenticated("the extended agent card is served to authenticated callers only")
        if isinstance(provider, AgentCard):
            return provider
        return await provider(call)

    async def dispatch(self, method: str, request: A2AModel, call: CallContext) -> Any:
        """Call the handler method an operation names (``Operation.handler``)."""
        quotas = self.quotas
        if quotas.quotas.rate > 0:  # (no coroutine per request when there is no request rate to keep)
            await quotas.charge(call.user)
        fn: Callable[[Any, CallContext], Awaitable[Any]] = getattr(self, method)
        if self.telemetry is not None:
            return await self.telemetry.dispatch(method, fn, request, call)
        return await fn(request, call)
