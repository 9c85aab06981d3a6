"""The inspector in headless Chromium, against the example agents (``relaykit serve … --inspector``), a deliberately
bad card, an a2a-sdk 1.3.0 agent and an a2a-sdk 0.3.26 agent (``relaykit inspect``). Every wait is bounded
(``PAGE_TIMEOUT_MS``); each test writes screenshots of the pages it visits (see conftest)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.servers import HOST, RoundRobinProxy, ServerProcess, free_port, start_serve

from inspector._browser import STREAM_DELAY, shot

pytestmark = pytest.mark.browser

Agents = dict[str, ServerProcess]
ROW_CELLS = "rows => rows.map(r => [...r.cells].map(c => c.textContent))"  # a table's rows as lists of cell texts


def open_inspector(page: Any, url: str) -> None:
    """Load the page and wait until it has connected (the card's findings are listed)."""
    page.goto(url)
    page.wait_for_selector("#findings li")


def chat(page: Any, text: str) -> Any:
    """Type ``text`` in the chat and send it with Enter; the new agent bubble."""
    page.get_by_role("tab", name="Chat").click()
    box = page.get_by_label("Message", exact=True)
    box.fill(text)
    box.press("Enter")
    return page.locator("#transcript li[data-role=agent]").last


def sse_ids(page: Any) -> list[str]:
    page.get_by_role("tab", name="Timeline").click()
    return [cell.strip() for cell in page.locator("#timeline tbody td.sse-id").all_inner_texts()]


# --- card -------------------------------------------------------------------------------------------------------


def test_card_page_shows_the_agent_and_its_findings(page: Any, agents: Agents) -> None:
    open_inspector(page, agents["echo"].url + "/inspector/")
    assert page.locator("#card-name").inner_text() == "echo"
    assert page.locator("#findings li[data-level=error]").count() == 0
    # relaykit serves 1.0 and 0.3 by default: one interface per binding per version, every one probed.
    rows = page.locator("#interfaces tbody tr")
    assert rows.count() == 4
    cells = rows.evaluate_all(ROW_CELLS)
    assert sorted((c[0], c[2].split(".")[0]) for c in cells) == [
        ("HTTP+JSON", "0"),
        ("HTTP+JSON", "1"),
        ("JSONRPC", "0"),
        ("JSONRPC", "1"),
    ]
    assert [c[3] for c in cells] == ["reachable"] * 4, cells
    shot(page, "card-echo")


def test_chat_over_0_3_with_a_dual_stack_agent(page: Any, agents: Agents) -> None:
    open_inspector(page, agents["echo"].url + "/inspector/")
    versions = page.locator("#version option").evaluate_all("options => options.map(o => o.value)")
    assert page.locator("#version").input_value().startswith("1.")  # 1.0 by default
    old = next(v for v in versions if v.startswith("0."))
    page.get_by_label("Version").select_option(old)
    page.get_by_role("button", name="Connect").click()
    page.wait_for_selector("#findings li")
    streamed = chat(page, "hello over 0.3")
    streamed.locator("[data-state=COMPLETED]").wait_for()
    assert "hello over 0.3" in streamed.locator(".artifacts").inner_text()
    assert f"A2A {old}" in streamed.inner_text()
    # Unary too (SendMessage), then what the agent sent, beside what the client decoded: the 0.3 shape.
    page.locator("#chat-stream").uncheck()
    unary = chat(page, "once more, unary")
    unary.locator("[data-state=COMPLETED]").wait_for()
    assert f"A2A {old}" in unary.inner_text()
    shot(page, "chat-0.3")
    page.get_by_role("tab", name="Timeline").click()
    sent: list[Any] = []
    decoded: list[Any] = []
    tasks = page.locator("#tl-task option").evaluate_all("options => options.map(o => o.value)")
    assert len(tasks) == 2  # the streamed task and the unary one
    for task in tasks:
        page.locator("#tl-task").select_option(task)
        sent += [json.loads(t) for t in page.locator("#timeline pre.wire").all_text_contents()]
        rows = page.locator("#timeline tbody td:last-child details:not(.wire) pre")
        decoded += [json.loads(t) for t in rows.all_text_contents()]
    assert len(sent) == len(decoded) >= 3, (sent, decoded)  # every event and response has both
    results = [s["result"] for s in sent]  # JSON-RPC envelopes, as sent
    kinds = {r.get("kind") for r in results}
    assert "task" in kinds, kinds
    assert kinds <= {"task", "message", "status-update", "artifact-update"}, kinds
    states = [r["status"]["state"] for r in results if "status" in r]
    assert "completed" in states  # 0.3's lower-case state names
    assert all("kind" not in d for d in decoded)  # the client's view is 1.0 ProtoJSON
    shot(page, "timeline-0.3")
    # The console sends a 0.3 session's requests to the 0.3 interface, as written (0.3 method names).
    task_id = next(r["id"] for r in results if r.get("kind") == "task")
    page.get_by_role("tab", name="Console").click()
    page.locator("#con-source", has_text="This session speaks A2A 0.3").wait_for()
    page.get_by_label("Binding").select_option("JSONRPC")
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task_id}}
    page.get_by_label("Body", exact=True).fill(json.dumps(rpc))
    page.get_by_role("button", name="Send the request").click()
    page.wait_for_function("() => document.getElementById('con-response').textContent.includes('completed')")
    answer = json.loads(page.locator("#con-response").text_content() or "{}")
    assert answer["result"]["kind"] == "task"
    assert answer["result"]["id"] == task_id
    shot(page, "console-0.3")


class _BadCard(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def bad_card() -> Iterator[str]:
    """A server whose card lacks required fields and names an interface nobody listens on."""
    card = {
        "name": "broken-agent",
        "description": "",
        "supportedInterfaces": [
            {"url": f"http://{HOST}:{free_port()}/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {},
        "skills": [{"id": "s", "name": "s"}],
    }
    handler = type("BadCard", (_BadCard,), {"body": json.dumps(card).encode()})
    server = ThreadingHTTPServer((HOST, 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_bad_card_shows_validation_findings(page: Any, agents: Agents, bad_card: str) -> None:
    # ``relaykit inspect`` may be pointed anywhere from the page: type the bad agent's URL and connect.
    open_inspector(page, agents["inspect"].url + "/")
    page.get_by_label("Agent URL").fill(bad_card)
    page.get_by_role("button", name="Connect").click()
    page.wait_for_function("() => document.getElementById('card-name').textContent === 'broken-agent'")
    errors = page.locator("#findings li[data-level=error]")
    text = errors.all_inner_texts()
    assert any("version" in t and "required" in t for t in text), text
    assert any("defaultInputModes" in t for t in text), text
    assert any("skills[0].tags" in t for t in text), text
    assert any("unreachable" in t for t in text), text
    shot(page, "card-bad")


# --- chat -------------------------------------------------------------------------------------------------------


def test_chat_with_echo_by_keyboard_alone(page: Any, agents: Agents) -> None:
    open_inspector(page, agents["echo"].url + "/inspector/")
    page.focus("#tab-card")
    page.keyboard.press("ArrowRight")  # the tab list moves with arrow keys
    assert page.evaluate("() => document.activeElement.id") == "tab-chat"
    assert page.locator("#view-chat").is_visible()
    for _ in range(10):  # Tab on to the message box
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.id") == "chat-text":
            break
    assert page.evaluate("() => document.activeElement.id") == "chat-text"
    page.keyboard.type("hello from the keyboard")
    page.keyboard.press("Enter")
    bubble = page.locator("#transcript li[data-role=agent]").last
    bubble.locator("[data-state=COMPLETED]").wait_for()
    assert "hello from the keyboard" in bubble.locator(".artifacts").inner_text()
    shot(page, "chat-echo")


def test_chat_sends_file_and_data_parts(page: Any, agents: Agents) -> None:
    open_inspector(page, agents["echo"].url + "/inspector/")
    page.get_by_role("tab", name="Chat").click()
    page.locator("#chat-more summary").click()
    page.get_by_label("Attach files (sent inline, base64)").set_input_files(
        {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"file body"}
    )
    page.get_by_label("Data part (JSON)").fill('{"answer": 42}')
    box = page.get_by_label("Message", exact=True)
    box.fill("with parts")
    box.press("Enter")
    page.locator("#transcript li[data-role=agent]").last.locator("[data-state=COMPLETED]").wait_for()
    mine = page.locator("#transcript li.user").last
    assert "notes.txt · text/plain · 9 bytes" in mine.inner_text()
    assert '"answer": 42' in mine.locator(".part-data").inner_text()
    assert mine.get_by_role("link", name="Download").get_attribute("download") == "notes.txt"
    shot(page, "chat-parts")


def test_stream_shows_chunks_live_and_the_timeline_lists_sse_ids(page: Any, agents: Agents) -> None:
    open_inspector(page, agents["stream"].url + "/inspector/")
    bubble = chat(page, "5")
    # Chunks arrive STREAM_DELAY apart: the page must show the first ones while the task is still WORKING.
    page.wait_for_function(
        """() => {
            const bubble = [...document.querySelectorAll('#transcript li[data-role=agent]')].pop();
            if (!bubble) return false;
            const text = bubble.querySelector('.artifacts').textContent;
            return text.includes('chunk 1') && !text.includes('chunk 4')
                && bubble.querySelector('[data-state]')?.dataset.state === 'WORKING';
        }"""
    )
    shot(page, "chat-stream-live")
    bubble.locator("[data-state=COMPLETED]").wait_for()
    assert bubble.locator(".artifacts").inner_text().count("chunk") == 5
    ids = sse_ids(page)
    assert len(ids) == 7, ids  # the task, five chunks, COMPLETED
    assert all(i.isdigit() for i in ids), ids
    assert [int(i) for i in ids] == sorted(int(i) for i in ids)
    kinds = page.locator("#timeline tbody tr").evaluate_all("rows => rows.map(r => r.dataset.kind)")
    assert kinds.count("artifactUpdate") == 5
    shot(page, "timeline-stream")


def test_a_cut_stream_is_resumed_after_its_last_sse_id(page: Any, agents: Agents, tmp_path: Path) -> None:
    # The agent's card points at a proxy whose connections the test cuts mid-stream; the page resubscribes after
    # the last SSE id it saw and shows every chunk exactly once.
    with RoundRobinProxy() as proxy:
        agent = start_serve(
            "examples/stream.py", tmp_path, public_url=proxy.url, env={"STREAM_DELAY": STREAM_DELAY}, name="stream-cut"
        )
        try:
            proxy.add_backend(agent.port)
            open_inspector(page, agents["inspect"].url + "/")
            page.get_by_label("Agent URL").fill(proxy.url)
            page.get_by_role("button", name="Connect").click()
            page.locator("#card-name", has_text="stream").wait_for()
            bubble = chat(page, "6")
            bubble.locator(".artifacts", has_text="chunk 1").wait_for()
            assert proxy.cut(agent.port) >= 1
            bubble.locator("[data-state=COMPLETED]").wait_for()
            text = bubble.locator(".artifacts").inner_text()
            assert [f"chunk {i}" in text for i in range(6)] == [True] * 6
            assert text.count("chunk") == 6, text
            page.get_by_role("tab", name="Timeline").click()
            note = page.locator("#timeline tbody tr[data-kind=note]").first
            assert "resubscribing after SSE id" in note.inner_text()
            shot(page, "timeline-resumed")
        finally:
            agent.stop()


def test_an_input_required_question_is_answered_in_the_page(page: Any, agents: Agents) -> None:
    open_inspector(page, agents["ask"].url + "/inspector/")
    first = chat(page, "hi")
    first.locator("[data-state=INPUT_REQUIRED]").wait_for()
    banner = page.locator("#chat-pending")
    banner.wait_for()
    assert "What is your name?" in banner.inner_text()
    shot(page, "chat-ask-question")
    second = chat(page, "Ada")
    second.locator("[data-state=COMPLETED]").wait_for()
    assert "Nice to meet you, Ada!" in second.inner_text()
    assert banner.is_hidden()
    # The same task answered: both bubbles name one task id.
    assert first.get_attribute("data-task") == second.get_attribute("data-task")
    shot(page, "chat-ask-answered")


def test_cancel_turns_the_task_canceled(page: Any, agents: Agents) -> None:
    open_inspector(page, agents["slow"].url + "/inspector/")
    bubble = chat(page, "take your time")
    bubble.locator("[data-state=WORKING]").wait_for()
    page.get_by_role("button", name="Cancel the task").click()
    bubble.locator("[data-state=CANCELED]").wait_for()
    shot(page, "chat-cancel")
    task_id = bubble.get_attribute("data-task")
    # The task list agrees.
    page.get_by_role("tab", name="Tasks").click()
    row = page.locator(f"#task-list tbody tr[data-task='{task_id}']")
    row.locator("[data-state=CANCELED]").wait_for()
    shot(page, "tasks-canceled")


def test_task_page_resubscribes_manages_push_configs_and_cancels(page: Any, agents: Agents) -> None:
    open_inspector(page, agents["slow"].url + "/inspector/")
    chat(page, "watch me").locator("[data-state=WORKING]").wait_for()
    page.get_by_role("tab", name="Tasks").click()
    page.locator("#task-list tbody tr[data-task] [data-state=WORKING]").first.wait_for()
    page.locator("#task-list tbody tr").filter(has=page.locator("[data-state=WORKING]")).first.locator("button").click()
    page.locator("#task-detail").wait_for()
    task_id = page.locator("#td-id").inner_text()
    # Push configs: add one, list it, delete it.
    page.get_by_label("Webhook URL").fill(f"http://{HOST}:{free_port()}/hook")
    page.get_by_role("button", name="Add a push config").click()
    delete = page.locator("#td-push tbody button")
    delete.wait_for()
    delete.click()
    page.wait_for_function("() => document.querySelectorAll('#td-push tbody tr').length === 0")
    # Resubscribe after the first SSE id (the chat's stream saw it), then cancel from the task page: the
    # subscription receives CANCELED.
    page.get_by_label("Resume after SSE id").fill("1")
    page.get_by_role("button", name="Resubscribe").click()
    page.get_by_role("button", name="Cancel", exact=True).click()
    page.locator("#td-state[data-state=CANCELED]").wait_for()
    shot(page, "task-detail")
    page.get_by_role("button", name="Show its timeline").click()
    page.locator("#timeline tbody tr[data-kind=note]", has_text="the subscription ended: CANCELED").wait_for()
    notes = page.locator("#timeline tbody tr[data-kind=note]").all_inner_texts()
    assert any("after SSE id 1" in n for n in notes), notes
    assert page.locator("#tl-task").input_value() == task_id
    shot(page, "timeline-resubscribe")


# --- tasks, console, zoom -----------------------------------------------------------------------------------------


def test_tasks_page_and_console(page: Any, agents: Agents) -> None:
    open_inspector(page, agents["echo"].url + "/inspector/")
    chat(page, "for the task list").locator("[data-state=COMPLETED]").wait_for()
    chat(page, "and one more").locator("[data-state=COMPLETED]").wait_for()
    page.get_by_role("tab", name="Tasks").click()
    page.locator("#task-list tbody tr").first.wait_for()
    # Filters and paging: one COMPLETED task per page.
    page.get_by_label("State").select_option(label="COMPLETED")
    page.get_by_label("Page size").fill("1")
    page.get_by_role("button", name="List tasks").click()
    page.locator("#task-count", has_text="Page 1 · 1 of").wait_for()
    page.get_by_role("button", name="Next page").click()
    page.locator("#task-count", has_text="Page 2 · 1 of").wait_for()
    assert page.locator("#task-list tbody tr").count() == 1
    page.locator("#task-list tbody tr button").first.click()
    page.locator("#task-detail").wait_for()
    task_id = page.locator("#td-id").inner_text()
    assert page.locator("#td-history li").count() >= 1
    shot(page, "tasks")
    # The console's operations come from the agent's /openapi.json; GetTask over REST for the selected task.
    page.get_by_role("tab", name="Console").click()
    page.get_by_label("Binding").select_option("HTTP+JSON")
    page.get_by_label("Operation").select_option(label="GetTask — GET /tasks/{id}")
    assert page.get_by_label("Path (REST)").input_value() == f"/tasks/{task_id}"
    assert "/openapi.json" in page.locator("#con-source").inner_text()
    page.get_by_role("button", name="Send the request").click()
    page.wait_for_function("() => document.getElementById('con-response').textContent.includes('TASK_STATE_COMPLETED')")
    assert "HTTP 200" in page.locator("#con-head").inner_text()
    shot(page, "console")


def test_readable_at_200_percent_zoom(browser: Any, agents: Agents) -> None:
    # 200% zoom of a 1280-pixel window: a 640-CSS-pixel viewport at device scale 2. Nothing may need sideways
    # scrolling (tables scroll inside their own box).
    context = browser.new_context(viewport={"width": 640, "height": 800}, device_scale_factor=2)
    context.set_default_timeout(15_000)
    try:
        zoomed = context.new_page()
        open_inspector(zoomed, agents["echo"].url + "/inspector/")
        for tab in ("Card", "Chat", "Tasks", "Timeline", "Console"):
            zoomed.get_by_role("tab", name=tab).click()
            width = zoomed.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], (tab, width)
        zoomed.get_by_role("tab", name="Card").click()
        shot(zoomed, "card-zoom-200")
    finally:
        context.close()


# --- relaykit inspect against the official SDK ----------------------------------------------------------------------


def test_inspect_an_a2a_sdk_agent(page: Any, agents: Agents) -> None:
    open_inspector(page, agents["inspect"].url + "/")
    assert page.locator("#card-name").inner_text() == "sdk-kitchen"
    assert page.locator("#findings li[data-level=error]").count() == 0
    shot(page, "card-sdk")
    bubble = chat(page, "hello sdk")
    bubble.locator("[data-state=COMPLETED]").wait_for()
    assert "hello sdk" in bubble.locator(".artifacts").inner_text()
    assert "via JSONRPC" in bubble.inner_text()  # the card's first choice
    # The transport is the session's choice.
    page.get_by_label("Transport").select_option("HTTP+JSON")
    page.get_by_role("button", name="Connect").click()
    rest = chat(page, "hello over rest")
    rest.locator("[data-state=COMPLETED]").wait_for()
    assert "via HTTP+JSON" in rest.inner_text()
    streamed = chat(page, "stream 3 50")
    streamed.locator("[data-state=COMPLETED]").wait_for()
    assert streamed.locator(".artifacts").inner_text().count("chunk") == 3
    asked = chat(page, "ask me")
    asked.locator("[data-state=INPUT_REQUIRED]").wait_for()
    answered = chat(page, "Grace")
    answered.locator("[data-state=COMPLETED]").wait_for()
    assert "got: Grace" in answered.inner_text()
    shot(page, "chat-sdk")
    page.get_by_role("tab", name="Timeline").click()
    assert page.locator("#timeline tbody tr").count() >= 1
    shot(page, "timeline-sdk")


def test_inspect_an_a2a_sdk_0_3_agent(page: Any, sdk03_inspect: Agents) -> None:
    open_inspector(page, sdk03_inspect["inspect"].url + "/")
    assert page.locator("#card-name").inner_text() == "sdk03 kitchen"
    assert page.locator("#findings li[data-level=error]").count() == 0
    # A 0.3 card (url + additionalInterfaces): every interface is 0.3, every one relaykit's client speaks is probed.
    cells = page.locator("#interfaces tbody tr").evaluate_all(ROW_CELLS)
    assert {c[0] for c in cells} >= {"JSONRPC", "HTTP+JSON"}
    assert all(c[2].startswith("0.3") for c in cells), cells
    # gRPC is probed when this environment has grpcio (relaykit[grpc]), else listed as skipped.
    assert all(c[3] == "reachable" for c in cells if c[0] != "GRPC" or c[3] != "skipped"), cells
    assert [c[3] for c in cells if c[0] != "GRPC"] == ["reachable", "reachable"], cells
    assert page.locator("#version").input_value().startswith("0.3")  # the only version on offer
    shot(page, "card-sdk03")
    bubble = chat(page, "hello sdk03")
    bubble.locator("[data-state=COMPLETED]").wait_for()
    assert "hello sdk03" in bubble.locator(".artifacts").inner_text()
    assert "via JSONRPC · A2A 0.3" in bubble.inner_text()
    streamed = chat(page, "stream 3")
    streamed.locator("[data-state=COMPLETED]").wait_for()
    assert all(f"chunk {i}" in streamed.locator(".artifacts").inner_text() for i in range(3))
    asked = chat(page, "ask me")
    asked.locator("[data-state=INPUT_REQUIRED]").wait_for()
    answered = chat(page, "Ada")
    answered.locator("[data-state=COMPLETED]").wait_for()
    assert "got: Ada" in answered.inner_text()
    page.get_by_label("Transport").select_option("HTTP+JSON")
    page.get_by_role("button", name="Connect").click()
    rest = chat(page, "hello over rest")
    rest.locator("[data-state=COMPLETED]").wait_for()
    assert "via HTTP+JSON · A2A 0.3" in rest.inner_text()
    shot(page, "chat-sdk03")
    # The timeline shows what the agent sent: over 0.3 HTTP+JSON the 0.3 ProtoJSON (a status update carries
    # ``final``, which 1.0 dropped), over 0.3 JSON-RPC the 0.3 JSON (``kind``, lower-case states).
    page.get_by_role("tab", name="Timeline").click()
    sent = [json.loads(t) for t in page.locator("#timeline pre.wire").all_text_contents()]
    updates = [s["statusUpdate"] for s in sent if "statusUpdate" in s]
    assert updates, sent
    assert updates[-1]["final"] is True, sent
    shot(page, "timeline-sdk03")
    first = page.locator("#tl-task option").first.get_attribute("value")
    assert first is not None
    page.locator("#tl-task").select_option(first)
    results = [json.loads(t)["result"] for t in page.locator("#timeline pre.wire").all_text_contents()]
    assert results
    assert all("kind" in r for r in results), results
    assert "completed" in [r["status"]["state"] for r in results if "status" in r]
