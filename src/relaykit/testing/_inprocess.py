"""In-process A2A: a ``Client`` wired to an executor or app through ASGI, with no sockets.

``httpx.ASGITransport`` buffers a whole response before returning it, so an SSE stream would arrive only once the
task ended (and a test that cancels a task while reading its stream would wait forever). ``StreamingASGITransport``
runs each request's app call as its own task and hands body chunks over as the app sends them; closing a response
early tells the app the client disconnected (``http.disconnect``), as a real server would.

ASGI transports run no lifespan: ``InProcessClient`` starts a relaykit app's engine itself
(``app.state.relaykit.start()``) and stops it on exit; any other ASGI app (e.g. FastAPI mounting relaykit) gets
the ASGI lifespan protocol (startup before the first request, shutdown on exit).

>>> from relaykit import agent
>>> from relaykit.testing import InProcessClient
>>> @agent
... async def echo(context):
...     return context.text
>>> async def main():
...     async with InProcessClient(echo) as client:
...         task = await client.send("hi")
...         assert task.artifacts[0].text_content == "hi"
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from relaykit.adapters._detect import as_executor, framework_of
from relaykit.client import Client
from relaykit.server._executor import AgentExecutor

__all__ = ["InProcessClient", "StreamingASGITransport", "build_app"]

DEFAULT_BASE_URL = "http://relaykit.test"
LIFESPAN_TIMEOUT = 30.0  # seconds for a foreign app's lifespan startup / shutdown
CLOSE_TIMEOUT = 5.0  # seconds an app call gets to end after its client disconnected, before it is cancelled

_Item = bytes | BaseException | None


def build_app(target: Any, *, public_url: str = DEFAULT_BASE_URL, **options: Any) -> Any:
    """The ASGI app for ``target``: an ``AgentExecutor`` (instance or class) or a framework's agent
    (``relaykit.adapters``) is served with ``create_app`` and a memory store (``options`` go to ``create_app``); an
    app is returned as it is.

    >>> from relaykit.testing import ScriptedAgent, complete
    >>> app = build_app(ScriptedAgent([complete("done")]))
    >>> app.state.relaykit is not None
    True
    """
    if isinstance(target, type) and issubclass(target, AgentExecutor):
        target = target()
    if framework_of(target) is not None:
        target = as_executor(target)
    if isinstance(target, AgentExecutor):
        from relaykit.http._app import create_app

        options.setdefault("store", "memory")
        return create_app(target, public_url=public_url, **options)
    if callable(target):
        return target
    raise TypeError(f"expected an AgentExecutor (instance or class) or an ASGI app, got {target!r}")


def relaykit_server(app: Any) -> Any:
    """The ``A2AServer`` behind a relaykit app (``None`` for other ASGI apps)."""
    return getattr(getattr(app, "state", None), "relaykit", None)


class StreamingASGITransport(httpx.AsyncBaseTransport):
    """An httpx transport that calls an ASGI app in-process and streams its responses.

    >>> import httpx
    >>> from relaykit.testing import StreamingASGITransport, build_app, ScriptedAgent, complete
    >>> transport = StreamingASGITransport(build_app(ScriptedAgent([complete()])))
    >>> http = httpx.AsyncClient(transport=transport, base_url="http://relaykit.test")
    """

    def __init__(self, app: Any, *, client: tuple[str, int] = ("127.0.0.1", 50000), root_path: str = "") -> None:
        self.app = app
        self.client = client
        self.root_path = root_path
        self._calls: dict[asyncio.Task[None], asyncio.Event] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port),
            "client": self.client,
            "root_path": self.root_path,
        }
        assert isinstance(request.stream, httpx.AsyncByteStream)
        request_body = request.stream.__aiter__()
        request_done = False
        started: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] = asyncio.get_running_loop().create_future()
        body: asyncio.Queue[_Item] = asyncio.Queue()
        disconnected = asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal request_done
            if not request_done and not disconnected.is_set():
                try:
                    chunk = await request_body.__anext__()
                except StopAsyncIteration:
                    request_done = True
                    return {"type": "http.request", "body": b"", "more_body": False}
                return {"type": "http.request", "body": bytes(chunk), "more_body": True}
            await disconnected.wait()
            return {"type": "http.disconnect"}

        async def send(message: Mapping[str, Any]) -> None:
            if disconnected.is_set():
                raise OSError("the client disconnected")
            if message["type"] == "http.response.start":
                if not started.done():
                    started.set_result((message["status"], list(message.get("headers", []))))
            elif message["type"] == "http.response.body":
                chunk = message.get("body", b"")
                if chunk and request.method != "HEAD":
                    body.put_nowait(bytes(chunk))
                if not message.get("more_body", False):
                    body.put_nowait(None)

        async def call() -> None:
            try:
                await self.app(scope, receive, send)
            except Exception as exc:
                # Before the response: the request fails with the app's exception; after it: the body read does.
                if not started.done():
                    started.set_exception(exc)
                else:
                    body.put_nowait(exc)
            finally:
                if not started.done():
                    started.set_exception(RuntimeError("the ASGI app returned without sending a response"))
                body.put_nowait(None)

        task = asyncio.create_task(call(), name=f"asgi {request.method} {request.url.path}")
        self._calls[task] = disconnected
        task.add_done_callback(self._forget)
        try:
            status, headers = await started
        except BaseException:
            disconnected.set()
            await _finish(task)
            raise
        return httpx.Response(status, headers=headers, stream=_Body(body, task, disconnected), request=request)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._calls.pop(task, None)

    async def aclose(self) -> None:
        """Disconnect every call still running and wait (bounded) for them to end."""
        calls = list(self._calls.items())
        for _task, disconnected in calls:
            disconnected.set()
        for task, _disconnected in calls:
            await _finish(task)


class _Body(httpx.AsyncByteStream):
    def __init__(self, queue: asyncio.Queue[_Item], task: asyncio.Task[None], disconnected: asyncio.Event) -> None:
        self.queue = queue
        self.task = task
        self.disconnected = disconnected

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def aclose(self) -> None:
        # A response closed before its end is a client going away: the app sees http.disconnect.
        self.disconnected.set()
        await _finish(self.task)


async def _finish(task: asyncio.Task[None]) -> None:
    """Wait (bounded) for an app call to end; cancel it past ``CLOSE_TIMEOUT``."""
    if task.done():
        return
    await asyncio.wait({task}, timeout=CLOSE_TIMEOUT)
    if not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CLOSE_TIMEOUT)


class _Lifespan:
    """The ASGI lifespan protocol for an app that is not a relaykit app (startup on enter, shutdown on exit)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.from_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.supported = True

    async def _run(self) -> None:
        async def receive() -> dict[str, Any]:
            return await self.to_app.get()

        async def send(message: dict[str, Any]) -> None:
            await self.from_app.put(message)

        try:
            await self.app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
        except Exception as exc:
            # An app without lifespan support raises on the unknown scope type: then there is nothing to run.
            await self.from_app.put({"type": "unsupported", "error": exc})

    async def _step(self, kind: str) -> None:
        await self.to_app.put({"type": f"lifespan.{kind}"})
        async with asyncio.timeout(LIFESPAN_TIMEOUT):
            reply = await self.from_app.get()
        if reply["type"] == "unsupported":
            self.supported = False
        elif reply["type"] == f"lifespan.{kind}.failed":
            raise RuntimeError(f"the app's lifespan {kind} failed: {reply.get('message', '')}")

    async def startup(self) -> None:
        self.task = asyncio.create_task(self._run(), name="asgi lifespan")
        await self._step("startup")

    async def shutdown(self) -> None:
        if self.task is None:
            return
        if self.supported and not self.task.done():
            await self._step("shutdown")
        await _finish(self.task)


class InProcessClient:
    """``async with InProcessClient(executor_or_app) as client:`` ⇒ a connected ``relaykit.client.Client``.

    The executor (instance or class) is served with ``create_app(executor, store="memory")``; an app made with
    ``create_app`` (or any ASGI app serving an agent card) is used as it is. Requests go through
    ``StreamingASGITransport``: no sockets, and streams are live. ``client_options`` go to ``Client`` (e.g.
    ``on_input_required=``, ``transports=("HTTP+JSON",)``); ``app_options`` to ``create_app``.

    >>> from relaykit.testing import InProcessClient, ScriptedAgent, artifact, complete
    >>> async def main():
    ...     async with InProcessClient(ScriptedAgent([artifact("hi"), complete()])) as client:
    ...         assert await client.ask("hello") == "hi"
    """

    def __init__(
        self,
        target: Any,
        *,
        base_url: str = DEFAULT_BASE_URL,
        headers: Mapping[str, str] | None = None,
        transports: Sequence[str] = ("JSONRPC", "HTTP+JSON"),
        app_options: Mapping[str, Any] | None = None,
        **client_options: Any,
    ) -> None:
        self.base_url = base_url
        self.app = build_app(target, public_url=base_url, **dict(app_options or {}))
        self.transport = StreamingASGITransport(self.app)
        self.http = httpx.AsyncClient(transport=self.transport, base_url=base_url, timeout=httpx.Timeout(60.0))
        # Nothing leaves the process (the ASGI transport), so credentials to the made-up host are no exposure.
        client_options.setdefault("allow_insecure_credentials", True)
        self.client = Client(base_url, http=self.http, headers=headers, transports=transports, **client_options)
        self._started_server = False
        self._lifespan: _Lifespan | None = None

    @property
    def server(self) -> Any:
        """The app's ``A2AServer`` (engine, handler, store), ``None`` for a foreign ASGI app."""
        return relaykit_server(self.app)

    async def __aenter__(self) -> Client:
        server = self.server
        if server is not None:
            if not server.started:
                await server.start()
                self._started_server = True
        else:
            self._lifespan = _Lifespan(self.app)
            await self._lifespan.startup()
        try:
            await self.client.connect()
        except BaseException:
            await self.aclose()
            raise
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client and its open streams, then stop the engine (if this client started it)."""
        try:
            await self.client.aclose()
            await self.transport.aclose()
            await self.http.aclose()
        finally:
            if self._started_server:
                self._started_server = False
                await self.server.stop()
            if self._lifespan is not None:
                lifespan, self._lifespan = self._lifespan, None
                await lifespan.shutdown()
