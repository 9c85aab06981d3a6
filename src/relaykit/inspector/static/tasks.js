// relaykit inspector: the Tasks view (list with filters and paging, one task, its actions and push configs).

import { $, api, badge, call, h, json, record, renderArtifact, renderMessage, renderParts, runStream, setStatus, short, state, TERMINAL, textOf, uuid } from "./core.js";

// --- tasks -----------------------------------------------------------------------------------------------------

export async function listTasks(page) {
  const t = state.tasks;
  t.page = page;
  const params = { pageToken: t.tokens[page] || "", includeArtifacts: true, historyLength: 0 };
  const context = $("tf-context").value.trim();
  if (context) params.contextId = context;
  if ($("tf-state").value) params.status = $("tf-state").value;
  const size = parseInt($("tf-size").value, 10);
  if (size > 0) params.pageSize = size;
  let result;
  try {
    result = (await api("call", { op: "ListTasks", params })).result;
    if (!result) throw new Error("no result");
  } catch (err) {
    setStatus(`ListTasks: ${err.message}`, true);
    return;
  }
  t.next = result.nextPageToken || "";
  t.tokens[page + 1] = t.next;
  $("tasks-next").disabled = !t.next;
  $("tasks-first").disabled = page === 0;
  $("task-count").textContent = `Page ${page + 1} · ${result.tasks.length} of ${result.totalSize ?? "?"} task(s)`;
  $("task-list").tBodies[0].replaceChildren(
    ...result.tasks.map((task) =>
      h("tr", { "data-task": task.id, class: task.id === t.selected ? "selected" : "" },
        h("td", {}, h("button", { type: "button", class: "linkish", onclick: () => openTask(task.id), text: task.id })),
        h("td", {}, badge(task.status?.state)),
        h("td", { class: "mono", text: task.contextId || "" }),
        h("td", { text: (task.status?.timestamp || "").replace("T", " ").replace("Z", "") }),
        h("td", { text: String((task.artifacts || []).length) })),
    ),
  );
  setStatus(`Listed ${result.tasks.length} task(s).`);
}

export async function openTask(id) {
  state.tasks.selected = id;
  for (const row of $("task-list").tBodies[0].rows) row.classList.toggle("selected", row.dataset.task === id);
  try {
    renderTask(await call("GetTask", { id }, id));
    $("task-detail").hidden = false;
    $("td-title").scrollIntoView({ block: "nearest" });
  } catch (err) {
    setStatus(`GetTask: ${err.message}`, true);
  }
}

export function renderTask(task) {
  state.tasks.selected = task.id;
  $("td-id").textContent = task.id;
  $("td-state").replaceWith(Object.assign(badge(task.status?.state), { id: "td-state" }));
  $("td-meta").textContent = `context ${task.contextId || "—"} · updated ${task.status?.timestamp || "—"}`;
  $("td-status-message").replaceChildren(task.status?.message ? renderParts(task.status.message.parts) : h("p", { class: "muted", text: "(none)" }));
  $("td-artifacts").replaceChildren(...(task.artifacts || []).map(renderArtifact));
  if (!(task.artifacts || []).length) $("td-artifacts").append(h("p", { class: "muted", text: "(none)" }));
  $("td-history").replaceChildren(...(task.history || []).map((m) => renderMessage(m, "li")));
  $("td-raw").textContent = json(task);
  const asking = task.status?.state === "TASK_STATE_INPUT_REQUIRED";
  $("td-answer").hidden = !asking;
  $("td-answer").dataset.context = task.contextId || "";
  if (asking) $("td-question").textContent = `The agent asks: ${textOf(task.status?.message?.parts) || "(no question text)"}`;
  $("td-cancel").disabled = TERMINAL.has(task.status?.state);
  const events = state.timelines.get(task.id) || [];
  const lastId = [...events].reverse().find((e) => e.id)?.id;
  if (lastId && !$("td-last-id").value) $("td-last-id").value = lastId;
}

export class TaskSink {
  event(event) {
    if (event.task) renderTask(event.task);
    else if (event.statusUpdate) {
      const now = event.statusUpdate.status?.state;
      $("td-state").replaceWith(Object.assign(badge(now), { id: "td-state" }));
    }
  }
}

export async function resubscribe() {
  const id = state.tasks.selected;
  if (!id) return;
  const last = $("td-last-id").value.trim() || null;
  record(id, { kind: "note", summary: `SubscribeToTask${last ? ` after SSE id ${last}` : ""}` });
  setStatus(`Subscribed to ${id}…`);
  try {
    const final = await runStream("SubscribeToTask", { id }, new TaskSink(), last, null);
    const ended = `the subscription ended${final ? `: ${short(final)}` : ""}`;
    record(id, { kind: "note", summary: ended });
    setStatus(`Task ${id}: ${ended}.`);
    renderTask(await call("GetTask", { id }, id));
  } catch (err) {
    setStatus(`SubscribeToTask: ${err.message}`, true);
  }
}

export async function cancelSelected() {
  const id = state.tasks.selected;
  try {
    renderTask(await call("CancelTask", { id }, id));
    setStatus(`Task ${id} canceled.`);
  } catch (err) {
    setStatus(`CancelTask: ${err.message}`, true);
  }
}

export async function answerSelected(event) {
  event.preventDefault();
  const id = state.tasks.selected;
  const text = $("td-answer-text").value;
  if (!id || !text.trim()) return;
  const message = { messageId: uuid(), role: "ROLE_USER", parts: [{ text }], taskId: id, contextId: $("td-answer").dataset.context || undefined };
  try {
    const result = await call("SendMessage", { message }, id);
    $("td-answer-text").value = "";
    if (result.task) renderTask(result.task);
    setStatus(`Answered task ${id}.`);
  } catch (err) {
    setStatus(`SendMessage: ${err.message}`, true);
  }
}

export async function listPush() {
  const id = state.tasks.selected;
  try {
    const result = await call("ListTaskPushNotificationConfigs", { taskId: id }, id);
    $("td-push").tBodies[0].replaceChildren(
      ...(result.configs || []).map((c) =>
        h("tr", {}, h("td", { class: "mono", text: c.id }), h("td", { text: c.url }), h("td", { text: c.token || "" }),
          h("td", { text: c.authentication ? c.authentication.scheme : "" }),
          h("td", {}, h("button", { type: "button", onclick: () => deletePush(id, c.id), text: `Delete ${c.id}` })))),
    );
    setStatus(`${(result.configs || []).length} push config(s).`);
  } catch (err) {
    setStatus(`Push configs: ${err.message}`, true);
  }
}

export async function createPush(event) {
  event.preventDefault();
  const id = state.tasks.selected;
  const params = { taskId: id, url: $("tp-url").value.trim() };
  if ($("tp-token").value.trim()) params.token = $("tp-token").value.trim();
  try {
    await call("CreateTaskPushNotificationConfig", params, id);
    await listPush();
  } catch (err) {
    setStatus(`CreateTaskPushNotificationConfig: ${err.message}`, true);
  }
}

export async function deletePush(taskId, configId) {
  try {
    await call("DeleteTaskPushNotificationConfig", { taskId, id: configId }, taskId);
    await listPush();
  } catch (err) {
    setStatus(`DeleteTaskPushNotificationConfig: ${err.message}`, true);
  }
}
