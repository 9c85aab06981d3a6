"""``A2AServer``: the running parts of one agent, whatever serves it, and their lifecycle.

Invariants:

* One ``A2AServer`` per agent process; every binding attached to it (the HTTP app, a ``GrpcServer``) shares its
  engine, handler, stores and push delivery, so there is one engine, one store and one drain.
* ``start()`` is idempotent and safe to race (HTTP's lifespan, a mounted app's first request and a gRPC server may
  all call it): stores open and orphans are recovered once. Push delivery starts after the stores.
* ``stop()`` drains the engine first (running executions get ``grace`` seconds, the rest FAIL), then push delivery
  (the notifications of the engine's last events are queued by then), then closes the push store.
* Nothing here knows a transport: the HTTP endpoints (health, readiness, card) live in ``relaykit.http``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from relaykit.assembly._signing import CardSigner
from relaykit.backends._base import delete_task_configs
from relaykit.push._sender import PushSender
from relaykit.push._signing import PushSigner
from relaykit.server._engine import TaskEngine
from relaykit.server._handler import RequestHandler
from relaykit.telemetry import Telemetry

__all__ = ["A2AServer"]

_READY_TIMEOUT = 2.0  # seconds a readiness probe waits for the store's or the bus's ping


class A2AServer:
    """The running parts behind an app: engine, handler, push delivery. ``app.state.relaykit`` holds it.

    Made by ``relaykit.assembly.assemble`` (or ``create_app``, which assembles one and serves it over HTTP);
    ``relaykit.grpc.GrpcServer(server)`` serves the same one over gRPC.

    >>> # server = assemble(echo); await server.start(); ...; await server.stop()
    """

    def __init__(
        self,
        engine: TaskEngine,
        handler: RequestHandler,
        *,
        grace: float = 5.0,
        retention: float | None = None,
        retention_interrupted: float | None = None,
    ) -> None:
        self.engine = engine
        self.handler = handler
        self.grace = grace
        self.retention = retention
        # Tasks left INPUT_REQUIRED / AUTH_REQUIRED expire after this many seconds (None: never).
        self.retention_interrupted = retention_interrupted
        self._purger_interrupted: asyncio.Task[None] | None = None
        self.started = False
        self.draining = False
        self._lock = asyncio.Lock()
        self._purger: asyncio.Task[None] | None = None
        # One access line per request (CONTRACT: operation, task id, outcome, duration; off by default).
        self.access_log = False
        # Webhook targets opened past the SSRF guard (--push-allow), read by push delivery.
        self.push_allow: tuple[str, ...] = ()
        # Push delivery (None when push is off): started after the stores, stopped after the engine drained.
        self.push_sender: PushSender | None = None
        # Signs webhook deliveries (None without a signing key); the HTTP app publishes its JWKS.
        self.push_signer: PushSigner | None = None
        # The base URL the card was built with; None when none was given, and the HTTP app then advertises the
        # address it is reached at (its mount path included).
        self.public_url: str | None = None
        # The A2A versions served ("1.0" always; "0.3" through the codec in front of the same handler).
        self.protocols: tuple[str, ...] = ("1.0",)
        # Observability (relaykit.telemetry.Telemetry) or None (off); ``metrics_endpoint``: serve GET /metrics.
        self.telemetry: Telemetry | None = None
        self.metrics_endpoint = False
        # Signs the served card (``card_signing_key``); the HTTP app re-signs a card whose URLs follow the request.
        self.card_signer: CardSigner | None = None

    def jwks(self) -> dict[str, Any] | None:
        """The public keys this agent publishes at ``/.well-known/jwks.json`` (push and card signing), or None."""
        keys: list[dict[str, Any]] = []
        if self.push_signer is not None:
            keys.extend(self.push_signer.jwks()["keys"])
        if self.card_signer is not None:
            keys.append(self.card_signer.jwk)
        return {"keys": keys} if keys else None

    async def start(self) -> None:
        """Open stores and recover orphans (idempotent)."""
        if self.started:
            return
        async with self._lock:
            if self.started:
                return
            # Authenticators first (a JWKS fetch can refuse the start before any store is opened).
            await self.handler.auth.start()
            # Recovery after the push sender started: a task failed "server restarted" notifies its webhooks.
            await self.engine.start(recover=False)
            await self.handler.push_store.start()
            if self.push_sender is not None:
                await self.push_sender.start()
            if self.engine.cluster is None:
                await self.engine.recover()
            self.handler.quotas.start()
            if self.retention:
                self._purger = asyncio.create_task(self._purge_loop(self.retention), name="relaykit-retention")
            if self.retention_interrupted:
                self._purger_interrupted = asyncio.create_task(
                    self._purge_loop(self.retention_interrupted, interrupted=True),
                    name="relaykit-retention-interrupted",
                )
            self.started = True

    async def _purge_loop(self, retention: float, *, interrupted: bool = False) -> None:
        # Purge at a tenth of the retention period (at most hourly), so nothing outlives it by much.
        log = logging.getLogger("relaykit.retention")
        kind = "interrupted" if interrupted else "terminal"
        while True:
            try:
                cutoff = datetime.now(UTC) - timedelta(seconds=retention)
                if interrupted:
                    count = await self._purge_tasks(cutoff, interrupted=True)
                    if count:
                        log.info("purged %d %s task(s) older than %s", count, kind, cutoff.isoformat())
                else:
                    removed = await self.purge(cutoff)
                    if any(removed):
                        log.info(
                            "purged %d terminal task(s), %d push dead letter(s), %d delivery-health row(s) older "
                            "than %s",
                            *removed,
                            cutoff.isoformat(),
                        )
            except Exception:
                log.exception("retention purge failed")
            await asyncio.sleep(min(retention / 10, 3600.0))

    async def purge(self, cutoff: datetime) -> tuple[int, int, int]:
        """Retention: terminal tasks, push dead letters and idle delivery-health rows older than ``cutoff``; returns
        how many of each were removed."""
        tasks = await self._purge_tasks(cutoff)
        dead = health = 0
        if self.push_sender is not None:
            dead, health = await self.push_sender.outbox.purge(cutoff.timestamp())
        return tasks, dead, health

    async def _purge_tasks(self, cutoff: datetime, *, interrupted: bool = False) -> int:
        """Purge the tasks (terminal, or ``interrupted`` ones) older than ``cutoff``, and their push configs with
        them: a config (its token and credentials with it) must not outlive its task. Returns the task count.

        The configs go after the tasks: a crash in between leaves those configs behind (of tasks no one can reach).
        """
        store = self.engine.store
        if not _names_purged(store):
            # A store written before ``purge`` could name what it deleted: its tasks go, their configs stay.
            return await store.purge(cutoff, interrupted=interrupted)
        purged: list[tuple[str, str, str]] = []
        count = await store.purge(cutoff, interrupted=interrupted, purged=purged)
        if purged:
            configs = await delete_task_configs(self.handler.push_store, purged)
            if configs:
                logging.getLogger("relaykit.retention").info(
                    "purged %d push config(s) of %d purged task(s)", configs, len(purged)
                )
        return count

    async def stop(self) -> None:
        """Drain running executions for the grace period, fail the rest, close stores."""
        if not self.started:
            return
        self.draining = True
        for purger in (self._purger, self._purger_interrupted):
            if purger is not None:
                purger.cancel()
        self._purger = self._purger_interrupted = None
        await self.engine.shutdown(self.grace)
        await self.handler.quotas.stop()
        if self.push_sender is not None:
            # After the engine: the notifications of its last events (e.g. "server shutdown") are queued by now.
            await self.push_sender.stop(drain=min(self.grace, 2.0))
        await self.handler.push_store.close()
        await self.handler.auth.close()
        self.started = False

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any = None) -> AsyncIterator[None]:
        """A lifespan context for the app (or a parent app that mounts it)."""
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def unready_reason(self) -> str | None:
        """``None`` when ready to serve; otherwise why not (CONTRACT: not started, draining, store or bus down).

        A store with a ``ping()`` is asked; the embedded stores are in-process and reachable whenever started.
        """
        if not (self.started and not self.draining and self.engine.accepting):
            return "not started or draining"
        ping = getattr(self.engine.store, "ping", None)
        if ping is not None:
            try:
                await asyncio.wait_for(ping(), timeout=_READY_TIMEOUT)
            except Exception:
                return "store unreachable"
        try:
            await asyncio.wait_for(self.engine.bus.ping(), timeout=_READY_TIMEOUT)
        except Exception:
            return "event bus unreachable"
        return None


def _names_purged(store: Any) -> bool:
    """Whether ``store.purge`` takes ``purged=`` (relaykit's stores do; a custom store written against the earlier
    ``TaskStore`` protocol may not, and must keep working)."""
    try:
        parameters = inspect.signature(store.purge).parameters
    except (TypeError, ValueError):  # pragma: no cover - a purge without a signature
        return False
    return "purged" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
