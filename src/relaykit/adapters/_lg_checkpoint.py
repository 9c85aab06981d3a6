"""A LangGraph checkpointer on relaykit's conversation store: thread id = A2A context id, kept with the tasks.

Invariants:

* one stored value per thread (``ConversationKey(thread_id, "langgraph", tenant, owner)``; tenant and owner come
  from the run config's ``relaykit_tenant`` / ``relaykit_owner``, which the adapter sets), holding, per checkpoint
  namespace, the LATEST checkpoint, its pending writes and the channel values it references. That is all a graph
  needs to continue a conversation or resume an interrupt; earlier checkpoints (time travel, ``get_state_history``)
  are not kept, nor is the history a ``DeltaChannel`` (beta) graph would need: give such a graph its own
  checkpointer;
* during an adapter's turn (``async with saver.thread(key)``) the thread lives in memory and is stored once when the
  turn's run ends well (completed or interrupted); a failed or cancelled run leaves the stored thread as it was.
  Outside a turn every write is stored at once;
* values are encoded with the saver's ``serde`` (LangGraph's JsonPlus serializer, msgpack), the thread as JSON with
  base64 bytes;
* the synchronous methods (``graph.invoke``, ``graph.get_state``) run the async ones: on the event loop the saver
  was last used on, when the caller is another thread (``await asyncio.to_thread(graph.invoke, ...)`` next to a
  served app: the store's connections belong to that loop); on a private loop when no loop is serving it (a plain
  script). Called from inside a running loop they raise: they would block the loop they need. (A saver knows its
  loop once it has been used there: a PostgreSQL-backed one must have served a turn before a worker thread calls it.)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)

from relaykit.adapters._conversations import ConversationKey, ConversationStore

__all__ = ["KIND", "ConversationSaver", "scope_config"]

KIND = "langgraph"
Typed = tuple[str, bytes]
_T = TypeVar("_T")


def scope_config(tenant: str, owner: str) -> dict[str, str]:
    """The ``configurable`` entries that scope a thread (merged into the run config by the adapter)."""
    return {"relaykit_tenant": tenant, "relaykit_owner": owner}


@dataclass
class _Namespace:
    checkpoint_id: str
    checkpoint: Typed
    metadata: Typed
    parent_id: str | None
    writes: dict[tuple[str, int], tuple[str, str, Typed, str]] = field(default_factory=dict)


@dataclass
class _Thread:
    namespaces: dict[str, _Namespace] = field(default_factory=dict)
    blobs: dict[tuple[str, str, str], Typed] = field(default_factory=dict)

    def encode(self) -> bytes:
        def typed(value: Typed) -> list[str]:
            return [value[0], base64.b64encode(value[1]).decode("ascii")]

        return json.dumps(
            {
                "ns": {
                    ns: {
                        "id": e.checkpoint_id,
                        "checkpoint": typed(e.checkpoint),
                        "metadata": typed(e.metadata),
                        "parent": e.parent_id,
                        "writes": [[t, i, w[1], typed(w[2]), w[3]] for (t, i), w in e.writes.items()],
                    }
                    for ns, e in self.namespaces.items()
                },
                "blobs": [[ns, ch, v, typed(b)] for (ns, ch, v), b in self.blobs.items()],
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> _Thread:
        def typed(value: list[str]) -> Typed:
            return (value[0], base64.b64decode(value[1]))

        data = json.loads(raw)
        thread = cls()
        for ns, e in data["ns"].items():
            thread.namespaces[ns] = _Namespace(
                e["id"],
                typed(e["checkpoint"]),
                typed(e["metadata"]),
                e["parent"],
                {(t, i): (t, ch, typed(v), path) for t, i, ch, v, path in e["writes"]},
            )
        thread.blobs = {(ns, ch, v): typed(b) for ns, ch, v, b in data["blobs"]}
        return thread


class ConversationSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints in relaykit's conversation store (see the module's invariants)."""

    def __init__(self, conversations: Callable[[], ConversationStore]) -> None:
        super().__init__()
        # A callable: the executor's conversation store can be rebound (``bind_store``) after the graph is built.
        self._conversations = conversations
        self._active: dict[ConversationKey, _Thread] = {}
        # The loop the async methods last ran on: where a synchronous caller's work must run (see _sync).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._private: asyncio.AbstractEventLoop | None = None  # a plain script's loop (see _sync)
        self._private_lock = threading.Lock()

    # --- turns -------------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def thread(self, key: ConversationKey) -> AsyncIterator[None]:
        """Hold ``key``'s thread in memory for one turn; store it if the block ends without an exception."""
        self._loop = asyncio.get_running_loop()
        raw = await self._conversations().load(key)
        self._active[key] = _Thread.decode(raw) if raw is not None else _Thread()
        try:
            yield
            await self._conversations().save(key, self._active[key].encode())
        finally:
            del self._active[key]

    def _key(self, config: RunnableConfig) -> ConversationKey:
        c = config["configurable"]
        return ConversationKey(
            str(c["thread_id"]), KIND, str(c.get("relaykit_tenant", "")), str(c.get("relaykit_owner", "anonymous"))
        )

    async def _read(self, key: ConversationKey) -> _Thread:
        self._loop = asyncio.get_running_loop()
        active = self._active.get(key)
        if active is not None:
            return active
        raw = await self._conversations().load(key)
        return _Thread.decode(raw) if raw is not None else _Thread()

    async def _written(self, key: ConversationKey, thread: _Thread) -> None:
        if key not in self._active:
            await self._conversations().save(key, thread.encode())

    # --- BaseCheckpointSaver (async) ---------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        key = self._key(config)
        ns = config["configurable"].get("checkpoint_ns", "")
        entry = (await self._read(key)).namespaces.get(ns)
        if entry is None:
            return None
        wanted = get_checkpoint_id(config)
        if wanted and wanted != entry.checkpoint_id:
            return None  # an earlier checkpoint: not kept
        return self._tuple(key, ns, entry, await self._read(key))

    def _tuple(self, key: ConversationKey, ns: str, entry: _Namespace, thread: _Thread) -> CheckpointTuple:
        checkpoint: Checkpoint = self.serde.loads_typed(entry.checkpoint)
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            blob = thread.blobs.get((ns, channel, str(version)))
            if blob is not None and blob[0] != "empty":
                values[channel] = self.serde.loads_typed(blob)
        writes = sorted(entry.writes.items(), key=lambda kv: (kv[1][3], kv[0][0], kv[0][1]))
        scope = {"relaykit_tenant": key.tenant, "relaykit_owner": key.owner}
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": key.context_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": entry.checkpoint_id,
                    **scope,
                }
            },
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self.serde.loads_typed(entry.metadata),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": key.context_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": entry.parent_id,
                        **scope,
                    }
                }
                if entry.parent_id
                else None
            ),
            pending_writes=[(task, channel, self.serde.loads_typed(value)) for _, (task, channel, value, _) in writes],
        )

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if config is None or "thread_id" not in config.get("configurable", {}):
            return  # threads are listed by conversation, not across them
        key = self._key(config)
        thread = await self._read(key)
        wanted_ns = config["configurable"].get("checkpoint_ns")
        wanted_id = get_checkpoint_id(config)
        limit_before = get_checkpoint_id(before) if before else None
        count = 0
        for ns, entry in thread.namespaces.items():
            if wanted_ns is not None and ns != wanted_ns:
                continue
            if (wanted_id and entry.checkpoint_id != wanted_id) or (
                limit_before and entry.checkpoint_id >= limit_before
            ):
                continue
            found = self._tuple(key, ns, entry, thread)
            if filter and not all(found.metadata.get(k) == v for k, v in filter.items()):
                continue
            if limit is not None and count >= limit:
                return
            count += 1
            yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        key = self._key(config)
        thread = await self._read(key)
        ns = config["configurable"].get("checkpoint_ns", "")
        stored: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = stored.pop("channel_values")
        for channel, version in new_versions.items():
            thread.blobs[(ns, channel, str(version))] = (
                self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b"")
            )
        thread.namespaces[ns] = _Namespace(
            checkpoint["id"],
            self.serde.dumps_typed(stored),
            self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)),
            config["configurable"].get("checkpoint_id"),
        )
        versions = {(ns_, ch, str(v)) for ns_, e in thread.namespaces.items() for ch, v in self._versions(e).items()}
        thread.blobs = {k: v for k, v in thread.blobs.items() if k in versions}
        await self._written(key, thread)
        return {
            "configurable": {
                "thread_id": key.context_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
                "relaykit_tenant": key.tenant,
                "relaykit_owner": key.owner,
            }
        }

    def _versions(self, entry: _Namespace) -> dict[str, Any]:
        checkpoint: Checkpoint = self.serde.loads_typed(entry.checkpoint)
        return dict(checkpoint["channel_versions"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        key = self._key(config)
        thread = await self._read(key)
        ns = config["configurable"].get("checkpoint_ns", "")
        entry = thread.namespaces.get(ns)
        if entry is None or entry.checkpoint_id != config["configurable"]["checkpoint_id"]:
            return  # writes for a checkpoint already superseded: never read again
        for idx, (channel, value) in enumerate(writes):
            inner = (task_id, WRITES_IDX_MAP.get(channel, idx))
            if inner[1] >= 0 and inner in entry.writes:
                continue  # a regular write is recorded once (a retried task must not duplicate it)
            entry.writes[inner] = (task_id, channel, self.serde.dumps_typed(value), task_path)
        await self._written(key, thread)

    async def adelete_thread(self, thread_id: str) -> None:
        self._loop = asyncio.get_running_loop()
        # Without a config the scope is unknown: delete the thread in every active scope, else the default scope.
        keys = [k for k in self._active if k.context_id == thread_id] or [ConversationKey(thread_id, KIND)]
        for key in keys:
            if key in self._active:
                self._active[key] = _Thread()
            else:
                await self._conversations().delete(key)

    # --- BaseCheckpointSaver (sync): the async methods, run where the store's connections live -------------------

    def _sync(self, work: Coroutine[Any, Any, _T]) -> _T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            work.close()
            raise asyncio.InvalidStateError(
                "synchronous calls to ConversationSaver would block the event loop they need: use the async API "
                "(await graph.ainvoke(...), graph.astream(...)), or call graph.invoke in a worker thread "
                "(await asyncio.to_thread(graph.invoke, ...))"
            )
        loop = self._loop
        if loop is None or not loop.is_running():
            # No served loop: one private loop in a daemon thread, for every sync call of this saver. (LangGraph
            # calls put_writes from its own worker threads while invoke waits: a loop per call, asyncio.run, could
            # be picked up by another thread as "the running loop" and closed under it, which hung invoke.)
            loop = self._private_loop()
        return asyncio.run_coroutine_threadsafe(work, loop).result()

    def _private_loop(self) -> asyncio.AbstractEventLoop:
        with self._private_lock:
            if self._private is None:
                self._private = asyncio.new_event_loop()
                threading.Thread(target=self._private.run_forever, name="relaykit-lg-saver", daemon=True).start()
            return self._private

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [found async for found in self.alist(config, filter=filter, before=before, limit=limit)]

        return iter(self._sync(collect()))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self.adelete_thread(thread_id))

    def get_next_version(self, current: str | None, channel: None) -> str:
        # InMemorySaver's scheme (LangGraph compares these as strings): a zero-padded counter, then a random part.
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"
