"""A push config sent inline with a message, without an id, in the queue mode of scale-out: an API replica
(``relaykit serve --no-worker``) accepts the message and a ``relaykit worker`` process runs it.

Both processes bind the inline config to the new task: the worker's push hook when the task's first event is
published (so the webhook hears of it from its first state on), and the accepting replica's request handler once it
has the task to answer with. Given no id, each once made one up, so the task had two configs and its webhook got
every notification twice. Now the id is derived from the message (``relaykit._ids.inline_config_id``), the task id
for a 0.3 client, so the second write is the first one's: one config, and every notification exactly once. For that
the two writes must agree on the whole key and config: the queued message keeps its config's 0.3 mark (else the
worker bound a 1.0 config, ``inline-<messageId>``, posting 1.0 bodies to a 0.3 webhook, beside the handler's), and
the handler binds under the task's tenant (else a tenant named by the path left a second config under tenant "").

Real processes on the test PostgreSQL and Redis, and a webhook recorder process, all on 127.0.0.1. Every case sends
``3 0.2`` (three chunks 0.2 s apart, then COMPLETED), so a config bound late (after a returnImmediately answer, or a
stream's first event) still has events to receive. After the terminal notification arrived, the test waits until
the outbox holds nothing more for any of the task's configs (``/relaykit/push/status``): a duplicate still on its
way would be counted, not missed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from support.servers import ServerProcess, start_process, stop_all
from tests.push.push_helpers import Recorder, state_of, stream_kinds, wait_until

from cluster.client import text_of
from cluster.deploy import AGENTS, Deployment, start_deployment

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(120)]

WAIT = 20.0  # seconds: the bound on any one wait
A2A = {"A2A-Version": "1.0"}
TEXT = "3 0.2"  # three chunks, 0.2 s apart, then COMPLETED
CHUNKS = ["chunk 0", "chunk 1", "chunk 2"]
TOKEN = "inline-token"
_rpc_ids = itertools.count(1)


@dataclass
class Split:
    """An API-only replica and a worker process on one namespace."""

    deployment: Deployment
    worker: ServerProcess

    @property
    def api(self) -> str:
        return self.deployment.urls[0]

    def logs(self) -> str:
        return f"{self.deployment.log_tails()}\n--- worker ---\n{self.worker.log_tail()}"


@pytest.fixture(scope="module")
def recorder() -> Iterator[Recorder]:
    made = Recorder()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def split(
    module_cluster_namespace: str, postgres_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Split]:
    log_dir = tmp_path_factory.mktemp("worker-push")
    push = ("--push-allow", "127.0.0.1", "--push-backoff", "0.05", "--push-max-backoff", "0.2")
    deployment = start_deployment(
        module_cluster_namespace,
        postgres_url,
        redis_url,
        log_dir,
        target=AGENTS,
        count=1,
        args=("--no-worker", *push),
        env=None,
    )
    try:
        # ``relaykit worker`` serves no A2A; its metrics port tells when it is up.
        worker = start_process(
            lambda port: [
                *(sys.executable, "-m", "relaykit.cli", "worker", AGENTS, "--store", postgres_url, "--bus", redis_url),
                *deployment.args(),
                *push,
                *("--log-level", "warning", "--grace", "1", "--metrics-port", str(port)),
            ],
            log_dir,
            name="worker",
            ready_path="/metrics",
        )
    except BaseException:
        stop_all(deployment.servers)
        raise
    yield Split(deployment, worker)
    stop_all([worker, *deployment.servers])


# --- the three ways of sending, and of listing the task's configs -----------------------------------------------


def _rpc(http: httpx.Client, url: str, method: str, params: dict[str, Any], headers: dict[str, str]) -> Any:
    reply = http.post(
        f"{url}/",
        json={"jsonrpc": "2.0", "id": next(_rpc_ids), "method": method, "params": params},
        headers=headers,
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert "result" in body, body
    return body["result"]


def _send_v10(http: httpx.Client, api: str, binding: str, mode: str, message_id: str, hook: str) -> str:
    """SendMessage (or SendStreamingMessage, read to its end) over 1.0; the task id. ``api`` may end in a tenant."""
    message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": TEXT}]}
    configuration: dict[str, Any] = {"taskPushNotificationConfig": {"url": hook, "token": TOKEN}}
    if mode == "returnImmediately":
        configuration["returnImmediately"] = True
    body = {"message": message, "configuration": configuration}
    if mode == "stream":
        assert binding == "rest"
        headers = {**A2A, "Accept": "text/event-stream"}
        with http.stream("POST", f"{api}/message:stream", json=body, headers=headers) as reply:
            assert reply.status_code == 200, reply.read().decode(errors="replace")
            data = [json.loads(line[5:]) for line in reply.iter_lines() if line.startswith("data:")]
        assert state_of(data[-1]) == "TASK_STATE_COMPLETED", data
        return str(data[0]["task"]["id"])
    if binding == "rest":
        reply = http.post(f"{api}/message:send", json=body, headers=A2A)
        assert reply.status_code == 200, reply.text
        task = reply.json()["task"]
    else:
        task = _rpc(http, api, "SendMessage", body, A2A)["task"]
    expected = "TASK_STATE_COMPLETED" if mode == "blocking" else None
    assert expected is None or task["status"]["state"] == expected, task
    return str(task["id"])


def _send_v03(http: httpx.Client, api: str, mode: str, message_id: str, hook: str) -> str:
    """0.3 ``message/send`` over JSON-RPC; the task id."""
    message = {"kind": "message", "messageId": message_id, "role": "user", "parts": [{"kind": "text", "text": TEXT}]}
    configuration = {"pushNotificationConfig": {"url": hook, "token": TOKEN}, "blocking": mode == "blocking"}
    task = _rpc(http, api, "message/send", {"message": message, "configuration": configuration}, {})
    assert task["kind"] == "task", task
    if mode == "blocking":
        assert task["status"]["state"] == "completed", task
    return str(task["id"])


def _configs(http: httpx.Client, api: str, binding: str, task_id: str) -> list[dict[str, Any]]:
    # (A tenant, for REST, ends ``api``.)
    """ListTaskPushNotificationConfigs, in the binding and version the task was created with (as 1.0 dicts: id, url)."""
    if binding == "rest":
        reply = http.get(f"{api}/tasks/{task_id}/pushNotificationConfigs", headers=A2A)
        assert reply.status_code == 200, reply.text
        return list(reply.json().get("configs", []))
    if binding == "jsonrpc":
        return list(_rpc(http, api, "ListTaskPushNotificationConfigs", {"taskId": task_id}, A2A).get("configs", []))
    listed = _rpc(http, api, "tasks/pushNotificationConfig/list", {"id": task_id}, {})
    return [{"id": c["pushNotificationConfig"].get("id", ""), **c["pushNotificationConfig"]} for c in listed]


# --- the test ------------------------------------------------------------------------------------------------------


CASES = [
    ("rest", "blocking", ""),
    ("rest", "returnImmediately", ""),
    ("rest", "stream", ""),
    ("rest", "returnImmediately", "acme"),  # a tenant named by the path: the config is the task's tenant's
    ("jsonrpc", "blocking", ""),
    ("jsonrpc", "returnImmediately", ""),
    ("jsonrpc-0.3", "blocking", ""),
    ("jsonrpc-0.3", "returnImmediately", ""),
]


@pytest.mark.parametrize(("binding", "mode", "tenant"), CASES, ids=["-".join(filter(None, case)) for case in CASES])
def test_an_inline_config_without_id_is_one_config_and_each_notification_arrives_once(
    split: Split, recorder: Recorder, binding: str, mode: str, tenant: str
) -> None:
    legacy = binding == "jsonrpc-0.3"
    path = f"/{binding}-{mode}-{uuid.uuid4().hex[:8]}"
    message_id = f"m-{uuid.uuid4()}"
    api = f"{split.api}/{tenant}" if tenant else split.api
    with httpx.Client(timeout=WAIT) as http:
        if legacy:
            task_id = _send_v03(http, api, mode, message_id, recorder.url(path))
        else:
            task_id = _send_v10(http, api, binding, mode, message_id, recorder.url(path))

        # The terminal notification arrives (bounded), and then nothing is left to deliver for any config of the task.
        def terminal_delivered() -> list[dict[str, Any]] | None:
            got = recorder.accepted(path)
            return got if any(_terminal(r) for r in got) else None

        try:
            wait_until(terminal_delivered, what=f"the terminal notification at {path}")
            status = wait_until(
                lambda: _drained(http, split.api, task_id, tenant),
                what=f"the outbox of task {task_id} to empty",
            )
        except AssertionError as exc:
            got = _digest(recorder.records(path))
            raise AssertionError(f"{exc}\nreceived: {got}\n{split.logs()}") from None
        configs = _configs(http, api, binding, task_id)
    stored = asyncio.run(_stored_configs(split.deployment, task_id))
    records = recorder.records(path)
    accepted = [r for r in records if r["status"] == 200]

    # Every notification once: nothing failed (so nothing was retried), no body came twice, the terminal one once
    # and last. (Two configs of one webhook post each event twice, with two event ids but the same body.)
    digest = _digest(accepted)
    assert len(accepted) == len(records), [r["status"] for r in records]
    assert len({r["headers"]["x-relaykit-event-id"] for r in accepted}) == len(accepted), digest
    assert len({r["body"] for r in accepted}) == len(accepted), digest
    assert [_terminal(r) for r in accepted].count(True) == 1, digest
    assert _terminal(accepted[-1]), digest
    assert all(r["headers"]["x-a2a-notification-token"] == TOKEN for r in accepted)
    # The worker binds the config at the task's first event, so the webhook hears of all of them, in order, whether
    # the caller waited, streamed or was answered at once.
    if legacy:
        # A 0.3 webhook gets what 0.3 sends: the task as it stands, as plain JSON.
        assert {r["headers"]["content-type"] for r in accepted} == {"application/json"}, digest
        assert [r["json"].get("kind") for r in accepted] == ["task"] * (len(CHUNKS) + 2), digest
        [artifact] = accepted[-1]["json"]["artifacts"]
        assert "".join(part["text"] for part in artifact["parts"]) == "".join(CHUNKS)
    else:
        assert {r["headers"]["content-type"] for r in accepted} == {"application/a2a+json"}, digest
        assert stream_kinds(accepted) == ["task", *["artifactUpdate"] * len(CHUNKS), "statusUpdate"], digest
        assert [text_of(r["json"]["artifactUpdate"]["artifact"]["parts"]) for r in accepted[1:-1]] == CHUNKS

    # One config: the replica that accepted the message and the worker that ran it bound the same one (in the
    # store too, whatever the tenant: the two writes had one key).
    assert len(configs) == 1, configs
    assert stored == [(tenant, configs[0]["id"])], stored
    assert configs[0]["url"] == recorder.url(path)
    if legacy:
        assert configs[0]["id"] == task_id  # what a 0.3 server names a task's inline config
    assert [c["configId"] for c in status["configs"]] == [configs[0]["id"]], status


def _terminal(record: dict[str, Any]) -> bool:
    """A notification of the task's completion, in the 1.0 shape (a StreamResponse) or the 0.3 one (the Task)."""
    body = record["json"]
    if body.get("kind") == "task":
        return bool(body["status"]["state"] == "completed")
    return state_of(body) == "TASK_STATE_COMPLETED"


def _drained(http: httpx.Client, api: str, task_id: str, tenant: str) -> dict[str, Any] | None:
    """The task's push status once no config has anything pending (None before)."""
    params = {"tenant": tenant} if tenant else {}
    reply = http.get(f"{api}/relaykit/push/status/{task_id}", params=params, headers=A2A)
    assert reply.status_code == 200, reply.text
    status: dict[str, Any] = reply.json()
    configs = status["configs"]
    return status if configs and all(c["pending"] == 0 for c in configs) else None


async def _stored_configs(d: Deployment, task_id: str) -> list[tuple[str, str]]:
    """``(tenant, id)`` of every push-config row the store holds for the task, whatever its tenant."""
    import asyncpg

    conn = await asyncpg.connect(d.store, timeout=5)
    try:
        rows = await conn.fetch(f"SELECT tenant, id FROM {d.namespace}_push_configs WHERE task_id = $1", task_id)
    finally:
        await conn.close()
    return sorted((str(row["tenant"]), str(row["id"])) for row in rows)


def _digest(records: list[dict[str, Any]]) -> list[str]:
    """What each notification was, for assertion messages."""
    return [f"{r['status']} {r['headers']['content-type']} {json.dumps(r['json'])[:150]}" for r in records]
