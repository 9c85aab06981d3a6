"""Push config operations on both bindings: several configs per task, server-assigned ids, idempotent delete,
ids scoped per task (reused across tasks), configs on completed tasks, and the capability switch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from push_helpers import A2A, Server

HOOK = "https://hooks.example.com/a2a"  # never called: the tasks here are already complete


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    made = Server("examples/echo.py", log_dir=tmp_path_factory.mktemp("crud-logs"))
    try:
        yield made
    finally:
        made.stop()


class Api:
    """The four config operations over one binding; errors come back as (reason, message)."""

    def __init__(self, server: Server, binding: str) -> None:
        self.base = server.base
        self.binding = binding

    def _rpc(self, method: str, params: dict[str, Any]) -> Any:
        reply = httpx.post(
            f"{self.base}/", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=A2A
        )
        body = reply.json()
        if "error" in body:
            return ("error", body["error"]["code"], body["error"]["data"][0]["reason"])
        return body["result"]

    def _rest(self, method: str, path: str, body: Any = None) -> Any:
        reply = httpx.request(method, f"{self.base}{path}", json=body, headers=A2A)
        data = reply.json()
        if reply.status_code != 200:
            return ("error", reply.status_code, data["error"]["details"][0]["reason"])
        return data

    def create(self, task_id: str, **config: Any) -> Any:
        config = {"url": HOOK, **config}
        if self.binding == "rest":
            return self._rest("POST", f"/tasks/{task_id}/pushNotificationConfigs", config)
        return self._rpc("CreateTaskPushNotificationConfig", {"taskId": task_id, **config})

    def get(self, task_id: str, config_id: str) -> Any:
        if self.binding == "rest":
            return self._rest("GET", f"/tasks/{task_id}/pushNotificationConfigs/{segment(config_id)}")
        return self._rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})

    def list(self, task_id: str) -> Any:
        if self.binding == "rest":
            return self._rest("GET", f"/tasks/{task_id}/pushNotificationConfigs")
        return self._rpc("ListTaskPushNotificationConfigs", {"taskId": task_id})

    def delete(self, task_id: str, config_id: str) -> Any:
        if self.binding == "rest":
            return self._rest("DELETE", f"/tasks/{task_id}/pushNotificationConfigs/{segment(config_id)}")
        return self._rpc("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})


def segment(value: str) -> str:
    """A path variable as a client puts it in the URL: every reserved character percent-encoded."""
    return quote(value, safe="")


def not_found(result: Any, binding: str) -> bool:
    return bool(result == ("error", -32001 if binding == "jsonrpc" else 404, "TASK_NOT_FOUND"))


@pytest.fixture(params=["jsonrpc", "rest"])
def api(request: pytest.FixtureRequest, server: Server) -> Api:
    return Api(server, request.param)


def completed(server: Server) -> str:
    reply = server.send("done")
    assert reply.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    return str(reply.json()["task"]["id"])


def test_card_declares_push(server: Server) -> None:
    card = httpx.get(f"{server.base}/.well-known/agent-card.json").json()
    assert card["capabilities"]["pushNotifications"] is True


def test_several_configs_per_task_with_server_assigned_ids(api: Api, server: Server) -> None:
    task_id = completed(server)
    first = api.create(task_id, token="t1")
    second = api.create(task_id, authentication={"scheme": "Bearer", "credentials": "x"})
    named = api.create(task_id, id="mine")
    assert first["id"]
    assert second["id"]
    assert first["id"] != second["id"]
    assert named["id"] == "mine"
    assert {first["taskId"], second["taskId"], named["taskId"]} == {task_id}
    assert api.get(task_id, first["id"])["token"] == "t1"
    assert api.get(task_id, second["id"])["authentication"] == {"scheme": "Bearer", "credentials": "x"}
    listed = api.list(task_id)["configs"]
    assert [c["id"] for c in listed] == [first["id"], second["id"], "mine"]


def test_create_with_an_existing_id_replaces_it(api: Api, server: Server) -> None:
    task_id = completed(server)
    api.create(task_id, id="c", url="https://one.example.com/")
    api.create(task_id, id="c", url="https://two.example.com/")
    assert [c["url"] for c in api.list(task_id)["configs"]] == ["https://two.example.com/"]


def test_delete_is_idempotent_and_get_after_delete_is_not_found(api: Api, server: Server) -> None:
    task_id = completed(server)
    api.create(task_id, id="gone")
    api.create(task_id, id="kept")
    assert api.delete(task_id, "gone") in (None, {})
    assert api.delete(task_id, "gone") in (None, {})
    assert api.delete(task_id, "never-existed") in (None, {})
    assert not_found(api.get(task_id, "gone"), api.binding)
    assert [c["id"] for c in api.list(task_id)["configs"]] == ["kept"]


def test_config_ids_are_scoped_per_task(api: Api, server: Server) -> None:
    one, two = completed(server), completed(server)
    api.create(one, id="tck-push-1", url="https://one.example.com/")
    api.create(two, id="tck-push-1", url="https://two.example.com/")
    assert api.get(one, "tck-push-1")["url"] == "https://one.example.com/"
    assert api.get(two, "tck-push-1")["url"] == "https://two.example.com/"
    api.delete(one, "tck-push-1")
    assert api.get(two, "tck-push-1")["url"] == "https://two.example.com/"


@pytest.mark.parametrize("config_id", ["a:b", "a/b", "x:cancel", "100%", "?#&=+ ", "ü"])
def test_a_client_chosen_id_is_addressable_over_rest_whatever_it_holds(
    api: Api, server: Server, config_id: str
) -> None:
    """Created on either binding, a config with "/" or ":" (or "%", or any other reserved character) in its id is
    fetched and deleted over REST with the id percent-encoded in the path, as on the other bindings (spec §5.1)."""
    task_id = completed(server)
    assert api.create(task_id, id=config_id)["id"] == config_id
    rest = Api(server, "rest")
    assert rest.get(task_id, config_id)["id"] == config_id
    assert [c["id"] for c in rest.list(task_id)["configs"]] == [config_id]
    assert rest.delete(task_id, config_id) in (None, {})
    assert not_found(rest.get(task_id, config_id), "rest")


def test_a_colon_in_an_id_may_also_be_sent_unencoded(server: Server) -> None:
    # RFC 3986 allows ":" in a path segment; no ":verb" route follows a config id, so it cannot be mistaken for one.
    task_id = completed(server)
    Api(server, "jsonrpc").create(task_id, id="a:b")
    path = f"{server.base}/tasks/{task_id}/pushNotificationConfigs/a:b"
    assert httpx.get(path, headers=A2A).json()["id"] == "a:b"
    assert httpx.delete(path, headers=A2A).status_code == 200
    assert httpx.get(path, headers=A2A).status_code == 404


def test_unknown_task_and_unknown_config_are_not_found(api: Api, server: Server) -> None:
    task_id = completed(server)
    assert not_found(api.get(task_id, "nope"), api.binding)
    assert not_found(api.create("no-such-task"), api.binding)
    assert not_found(api.list("no-such-task"), api.binding)
    assert not_found(api.delete("no-such-task", "x"), api.binding)


def test_inline_config_is_bound_to_the_new_task(server: Server) -> None:
    reply = server.send("hi", push={"id": "inline", "url": HOOK, "token": "tok"})
    task_id = reply.json()["task"]["id"]
    config = Api(server, "rest").get(task_id, "inline")
    assert (config["taskId"], config["url"], config["token"]) == (task_id, HOOK, "tok")
    without_id = server.send("hi", push={"url": HOOK}).json()["task"]["id"]
    [assigned] = Api(server, "rest").list(without_id)["configs"]
    assert assigned["id"]
    assert assigned["taskId"] == without_id


def test_a_follow_up_s_inline_config_naming_its_task_is_bound(tmp_path_factory: pytest.TempPathFactory) -> None:
    # A follow-up's inline config may carry the task's id already; it is stored all the same (it once looked bound).
    ask = Server("examples/ask.py", log_dir=tmp_path_factory.mktemp("ask-logs"))
    try:
        first = ask.send("hi").json()["task"]
        assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        task_id = first["id"]
        push = {"id": "later", "taskId": task_id, "url": HOOK, "token": "t2"}
        answer = ask.send("Ada", task_id=task_id, push=push).json()["task"]
        configs = Api(ask, "rest").list(task_id)["configs"]
    finally:
        ask.stop()
    assert answer["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [(c["id"], c["taskId"], c["token"]) for c in configs] == [("later", task_id, "t2")]


def test_push_off(tmp_path_factory: pytest.TempPathFactory) -> None:
    off = Server("examples/echo.py", "--no-push", log_dir=tmp_path_factory.mktemp("nopush-logs"))
    try:
        card = httpx.get(f"{off.base}/.well-known/agent-card.json").json()
        task_id = completed(off)
        rpc = Api(off, "jsonrpc").create(task_id)
        rest = Api(off, "rest").create(task_id)
        inline = off.send("hi", push={"url": HOOK})
        no_status = httpx.get(f"{off.base}/relaykit/push/status/{task_id}", headers=A2A)
    finally:
        off.stop()
    assert card["capabilities"]["pushNotifications"] is False
    assert rpc == ("error", -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED")
    assert rest == ("error", 400, "PUSH_NOTIFICATION_NOT_SUPPORTED")
    assert inline.status_code == 400
    assert no_status.status_code == 404
