// relaykit inspector: the Chat view (text, file and data parts; streamed answers; input-required turns; cancel).

import { $, call, describeError, h, payloadOf, renderArtifact, renderMessage, renderParts, runStream, setStatus, short, state, stateOf, uuid } from "./core.js";

// --- chat ------------------------------------------------------------------------------------------------------

export class AgentBubble {
  constructor() {
    this.taskId = null;
    this.artifacts = new Map();
    this.state = h("span", { class: "state", text: "…" });
    this.task = h("code", { class: "task-id" });
    this.via = h("span", { class: "via" });
    this.status = h("div", { class: "parts status-message" });
    this.body = h("div", { class: "artifacts" });
    this.el = h("li", { class: "msg agent", "data-role": "agent" },
      h("div", { class: "msg-head" }, h("span", { class: "who", text: "Agent" }), this.task, this.state, this.via),
      this.status, this.body);
    $("transcript").append(this.el);
    this.el.scrollIntoView({ block: "nearest" });
  }

  binding(name, version) {
    if (name) this.via.textContent = `via ${name}${version ? ` · A2A ${version}` : ""}`;
  }

  setState(stateName) {
    const name = short(stateName);
    this.state.className = `state ${name}`;
    this.state.dataset.state = name;
    this.state.textContent = name;
  }

  setTask(id, contextId) {
    if (id && this.taskId !== id) {
      this.taskId = id;
      this.task.textContent = `task ${id}`;
      this.el.dataset.task = id;
    }
    if (contextId) state.chat.contextId = contextId;
  }

  artifact(artifact, append) {
    const known = this.artifacts.get(artifact.artifactId);
    const merged = append && known ? { ...known, parts: [...known.parts, ...(artifact.parts || [])] } : artifact;
    this.artifacts.set(artifact.artifactId, merged);
    const node = renderArtifact(merged);
    const old = this.body.querySelector(`[data-artifact="${CSS.escape(artifact.artifactId)}"]`);
    if (old) old.replaceWith(node);
    else this.body.append(node);
  }

  event(event) {
    const [kind, value] = payloadOf(event);
    if (kind === "task") {
      this.setTask(value.id, value.contextId);
      this.setState(value.status?.state);
      this.statusMessage(value.status?.message);
      this.artifacts.clear();
      this.body.replaceChildren();
      for (const a of value.artifacts || []) this.artifact(a, false);
    } else if (kind === "statusUpdate") {
      this.setTask(value.taskId, value.contextId);
      this.setState(value.status?.state);
      this.statusMessage(value.status?.message);
    } else if (kind === "artifactUpdate") {
      this.setTask(value.taskId, value.contextId);
      this.artifact(value.artifact, value.append);
    } else if (kind === "message") {
      if (value.taskId) this.setTask(value.taskId, value.contextId);
      else if (value.contextId) state.chat.contextId = value.contextId;
      if (!this.taskId) this.setState("MESSAGE");
      this.status.append(renderParts(value.parts));
    }
  }

  statusMessage(message) {
    this.status.replaceChildren();
    if (message && message.parts) this.status.append(renderParts(message.parts));
  }

  error(err) {
    this.el.classList.add("error");
    this.status.append(h("p", { class: "part-text error-text", text: describeError(err) }));
  }
}

export function fileBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

export async function composeParts() {
  const parts = [];
  const text = $("chat-text").value;
  if (text.trim()) parts.push({ text });
  for (const file of $("chat-files").files) {
    parts.push({ raw: await fileBase64(file), filename: file.name, mediaType: file.type || "application/octet-stream" });
  }
  const data = $("chat-data").value.trim();
  if (data) parts.push({ data: JSON.parse(data) });
  return parts;
}

export async function sendChat(event) {
  event.preventDefault();
  if (state.chat.running) return;
  if (!state.card) {
    setStatus("Connect to an agent first.", true);
    return;
  }
  let parts;
  try {
    parts = await composeParts();
  } catch (err) {
    setStatus(`The data part is not JSON: ${err.message}`, true);
    return;
  }
  if (!parts.length) {
    setStatus("Type a message (or attach a file or data) first.", true);
    return;
  }
  const message = { messageId: uuid(), role: "ROLE_USER", parts };
  if (state.chat.contextId) message.contextId = state.chat.contextId;
  const pending = state.chat.pending;
  if (pending) {
    message.taskId = pending.id;
    message.contextId = pending.contextId;
  }
  $("chat-text").value = "";
  $("chat-files").value = "";
  $("chat-data").value = "";
  $("transcript").append(renderMessage(message, "li"));
  const bubble = new AgentBubble();
  if (pending) bubble.setTask(pending.id, pending.contextId);
  const streaming = $("chat-stream").checked && !$("chat-stream").disabled;
  state.chat.running = { bubble, controller: new AbortController() };
  $("chat-send").disabled = true;
  $("chat-cancel").disabled = false;
  setStatus(streaming ? "Streaming…" : "Waiting for the answer…");
  let final = null;
  try {
    if (streaming) {
      final = await runStream("SendStreamingMessage", { message }, bubble, null, state.chat.running.controller.signal);
    } else {
      const result = await call("SendMessage", { message }, message.taskId, bubble);
      bubble.event(result);
      final = stateOf(result) || (result.message ? "MESSAGE" : null);
    }
    setStatus(final ? `Answered: ${short(final)}` : "Done");
  } catch (err) {
    bubble.error(err.error || { type: "Error", message: err.message });
    setStatus(err.message, true);
  } finally {
    state.chat.running = null;
    $("chat-send").disabled = false;
    $("chat-cancel").disabled = true;
  }
  afterTurn(bubble, final);
}

export function afterTurn(bubble, final) {
  const banner = $("chat-pending");
  if (final === "TASK_STATE_INPUT_REQUIRED" && bubble.taskId) {
    state.chat.pending = { id: bubble.taskId, contextId: state.chat.contextId };
    const question = bubble.status.textContent.trim();
    banner.textContent = `The agent asks${question ? `: ${question}` : " for input"}. Your next message answers task ${bubble.taskId}.`;
    banner.hidden = false;
    $("chat-text").focus();
  } else {
    state.chat.pending = null;
    banner.hidden = true;
  }
  $("chat-context").textContent = state.chat.contextId ? `Conversation (context ${state.chat.contextId})` : "A new conversation";
}

export async function cancelChat() {
  const running = state.chat.running;
  const taskId = (running && (running.taskId || running.bubble.taskId)) || (state.chat.pending && state.chat.pending.id);
  if (!taskId) {
    setStatus("No task to cancel yet.", true);
    return;
  }
  try {
    const task = await call("CancelTask", { id: taskId }, taskId);
    if (running) running.bubble.event({ task });
    setStatus(`Task ${taskId}: ${short(task.status?.state)}`);
  } catch (err) {
    setStatus(err.message, true);
  }
}

export function newConversation() {
  state.chat.contextId = "";
  state.chat.pending = null;
  $("chat-pending").hidden = true;
  $("transcript").replaceChildren();
  $("chat-context").textContent = "A new conversation";
  $("chat-text").focus();
}
