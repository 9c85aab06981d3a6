"""Push credentials at rest: sealed in every store when a key is configured, returned to their owner in the clear,
sent to the webhook in the clear; and the SQLite file (with its WAL) readable by its owner only."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from auth.conftest import T
from auth.whoami_agent import whoami
from client._net import MiniHTTP, Request, Response

from relaykit import Task, TaskState
from relaykit.push import SealedPushConfigStore, new_secrets_key
from relaykit.types import AuthenticationInfo

TOKEN = "tok-very-secret"
CREDENTIALS = "cred-very-secret"


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The store's kind; for PostgreSQL, its namespace is made here, before ``agent`` (listed after this fixture):
    fixtures end in reverse order, so the server stops before its tables are dropped."""
    if request.param == "postgres":
        request.getfixturevalue("pg_namespace")
    return str(request.param)


@pytest.mark.parametrize(
    "backend", ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_credentials_are_sealed_at_rest_and_clear_for_their_owner(
    backend: str, agent: Callable[..., Any], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    received: list[Request] = []
    done = asyncio.Event()

    async def webhook(req: Request) -> Response:
        received.append(req)
        done.set()
        return Response(200, [], b"")

    hook = await MiniHTTP(webhook).start()
    options: dict[str, Any] = {"push_secrets_key": new_secrets_key()}
    if backend == "postgres":
        options["namespace"] = request.getfixturevalue("pg_namespace")
        options["store"] = request.getfixturevalue("postgres_url")
    elif backend == "sqlite":
        options["store"] = f"sqlite:///{tmp_path / 'agent.db'}"
    served = await agent(whoami, **options)
    try:
        async with asyncio.timeout(T):
            client = await served.client("JSONRPC")
            task = await client.send("slow", return_immediately=True)
            assert isinstance(task, Task)
            await client.create_push_config(
                task.id,
                hook.url + "/hook",
                config_id="c1",
                token=TOKEN,
                authentication=AuthenticationInfo(scheme="Bearer", credentials=CREDENTIALS),
            )
            mine = await client.get_push_config(task.id, "c1")
            assert mine.token == TOKEN
            assert mine.authentication is not None
            assert mine.authentication.credentials == CREDENTIALS

            sealed_store = served.app.state.relaykit.handler.push_store.store
            assert isinstance(sealed_store, SealedPushConfigStore)
            [at_rest] = await sealed_store.store.list(task.id, owner="anonymous")
            assert at_rest.token.startswith("sealed:v1:")
            assert TOKEN not in at_rest.to_json().decode()
            assert CREDENTIALS not in at_rest.to_json().decode()

            assert (await client.cancel(task.id)).status.state is TaskState.CANCELED
            await done.wait()
        delivered = received[0]
        assert delivered.headers["authorization"] == f"Bearer {CREDENTIALS}"
        assert delivered.headers["x-a2a-notification-token"] == TOKEN
        if backend == "sqlite":
            for path, data in _files(tmp_path).items():
                assert TOKEN.encode() not in data, path
                assert CREDENTIALS.encode() not in data, path
    finally:
        await hook.aclose()


def _files(directory: Path) -> dict[Path, bytes]:
    """The SQLite database and its WAL / SHM files, with their bytes."""
    return {path: path.read_bytes() for path in sorted(directory.glob("agent.db*"))}


async def test_the_sqlite_file_is_private(agent: Callable[..., Any], tmp_path: Path) -> None:
    await agent(whoami, store=f"sqlite:///{tmp_path / 'agent.db'}")
    files = _files(tmp_path)
    assert files
    for path in files:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode & 0o077 == 0, f"{path.name} is {oct(mode)}"


def test_a_wrong_key_is_an_error_not_a_guess() -> None:
    from relaykit.backends.memory import MemoryPushConfigStore
    from relaykit.types import TaskPushNotificationConfig

    config = TaskPushNotificationConfig(id="c", task_id="t", url="https://hooks.example/", token=TOKEN)
    sealed = SealedPushConfigStore(MemoryPushConfigStore(), new_secrets_key()).seal(config)
    old_key = new_secrets_key()
    other = SealedPushConfigStore(MemoryPushConfigStore(), old_key)
    with pytest.raises(ValueError, match="cannot be unsealed"):
        other.unseal(sealed)
    rotated = SealedPushConfigStore(MemoryPushConfigStore(), [new_secrets_key(), old_key])  # the new key seals
    assert rotated.unseal(other.seal(config)).token == TOKEN
    assert other.unseal(config).token == TOKEN  # stored before a key was configured: read as it is
