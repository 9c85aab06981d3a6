"""One PostgreSQL namespace, two ways to serve it, never both at once (CONTRACT "relaykit serve"): one process on the
in-process bus, or any number of Redis-bus replicas and workers. Whichever kind comes second is refused at start
(one line, exit 2) before it touches a task, and the processes already serving go on undisturbed: in particular a
refused in-process-bus process never marks the replicas' running tasks FAILED "server restarted".
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from support.servers import REPO_ROOT, environ, free_port, start_serve

from cluster.client import TERMINAL, artifact_texts, chunks, get_task, message, send, wait_for_state
from cluster.deploy import AGENTS, Deploy

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(180)]

WAIT = 30.0  # seconds: the bound on any one wait (a refused start included: imports are slow on a busy machine)
# ``paced`` work that outlasts the refused starts by far (about 20 s), so the test sees it running after them.
LONG_WORK = "40 0.5"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=WAIT) as client:
        yield client


async def refused(*args: str) -> str:
    """Run ``relaykit ARGS`` (no bus or store from the environment); its stderr, once it exited with code 2."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "relaykit.cli", *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO_ROOT,
        env=environ({"RELAYKIT_BUS": None, "RELAYKIT_STORE": None}),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), WAIT)
    except TimeoutError:
        raise AssertionError(f"relaykit {' '.join(args)} was not refused: still running after {WAIT:g} s") from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = err.decode(errors="replace")
    assert proc.returncode == 2, f"exit code {proc.returncode}\n{out.decode(errors='replace')}\n{text}"
    assert text.count("\n") == 1, text  # one line, no traceback
    return text


async def guard_modes(store: str, namespace: str) -> list[str]:
    """How each session holding the namespace guard holds it (``ShareLock`` / ``ExclusiveLock``), as the server says."""
    import asyncpg

    from relaykit.backends.postgres._schema import lock_key

    key = lock_key("serve", namespace)
    conn = await asyncpg.connect(store, timeout=5)
    try:
        rows = await conn.fetch(
            "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1::bigint::oid "
            "AND objid = $2::bigint::oid AND objsubid = 1",
            (key >> 32) & 0xFFFFFFFF,
            key & 0xFFFFFFFF,
        )
    finally:
        await conn.close()
    return sorted(str(row[0]) for row in rows)


async def test_replicas_start_together_and_an_in_process_bus_server_beside_them_is_refused(
    deploy: Deploy, http: httpx.AsyncClient
) -> None:
    d = deploy(AGENTS, 3)  # started in parallel, as a deployment starts them
    assert await guard_modes(d.store, d.namespace) == ["ShareLock"] * 3
    sent = await send(http, d.urls[0], message(LONG_WORK, return_immediately=True))
    task_id = sent["task"]["id"]
    runner = await d.wait_claimant(task_id)
    await wait_for_state(http, d.urls[0], task_id, {"TASK_STATE_WORKING"}, WAIT)

    # The in-process bus (no --bus): refused, naming who holds the store and what to do.
    error = await refused(
        *("serve", AGENTS, "--host", "127.0.0.1", "--port", str(free_port())),
        *("--store", d.store, "--namespace", d.namespace),
    )
    assert error.startswith("relaykit serve: error: another relaykit process is using this PostgreSQL store"), error
    assert "with the Redis bus (3 replica(s) or worker(s), held by" in error
    assert "--bus redis://" in error
    assert "another --namespace" in error

    # It touched nothing: the task still runs where it ran, and completes there.
    assert (await get_task(http, d.urls[1], task_id))["status"]["state"] == "TASK_STATE_WORKING"
    done = await wait_for_state(http, d.urls[2], task_id, TERMINAL, WAIT)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done
    assert artifact_texts(done) == ["".join(chunks(40))]
    assert [pid for ran, _, pid in d.runs() if ran == task_id] == [runner.proc.pid]
    assert all(server.alive for server in d.servers)
    assert not any("server restarted" in server.log() for server in d.servers), d.log_tails()


async def test_a_replica_and_a_worker_beside_an_in_process_bus_server_are_refused(
    cluster_namespace: str, postgres_url: str, redis_url: str, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    alone = start_serve(
        AGENTS, tmp_path, store=postgres_url, args=["--namespace", cluster_namespace], env={"RELAYKIT_BUS": None}
    )
    try:
        assert await guard_modes(postgres_url, cluster_namespace) == ["ExclusiveLock"]
        sent = await send(http, alone.url, message(LONG_WORK, return_immediately=True))
        task_id = sent["task"]["id"]
        await wait_for_state(http, alone.url, task_id, {"TASK_STATE_WORKING"}, WAIT)

        where = ("--store", postgres_url, "--bus", redis_url, "--namespace", cluster_namespace)
        for command in (("serve", AGENTS, "--host", "127.0.0.1", "--port", str(free_port())), ("worker", AGENTS)):
            error = await refused(*command, *where)
            assert error.startswith(
                f"relaykit {command[0]}: error: another relaykit process is using this PostgreSQL store"
            ), error
            holder = f"'relaykit {cluster_namespace} guard pid {alone.proc.pid}@"
            assert f"with the in-process bus (held by {holder}" in error
            assert "Redis-bus replicas and workers cannot join it" in error

        # Neither took a share of the namespace, and the task runs on undisturbed.
        assert await guard_modes(postgres_url, cluster_namespace) == ["ExclusiveLock"]
        assert (await get_task(http, alone.url, task_id))["status"]["state"] == "TASK_STATE_WORKING"
        done = await wait_for_state(http, alone.url, task_id, TERMINAL, WAIT)
        assert done["status"]["state"] == "TASK_STATE_COMPLETED", done
        assert alone.alive
    finally:
        alone.stop()
