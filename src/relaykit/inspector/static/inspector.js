// relaykit inspector: the page. Plain ES module, no dependencies, no build step.
//
// The page keeps the session (agent URL, headers, transport, version) and sends it with every call to the
// inspector's API (api/…), whose server side talks to the agent through relaykit's Client. Agent data is always
// rendered as text (textContent), never as markup.

const $ = (id) => document.getElementById(id);

const TERMINAL = new Set(["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"]);
const INTERRUPTED = new Set(["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"]);
const STATES = [
  "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED",
  "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
];
const RESUME_ATTEMPTS = 3;

const state = {
  config: null,
  session: { url: "", transport: "auto", version: "1.0", headers: [] },
  card: null,
  chat: { contextId: "", pending: null, running: null },
  tasks: { tokens: [""], page: 0, next: "", selected: null },
  timelines: new Map(),
  seq: 0,
  openapi: null,
};

// --- small helpers -------------------------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = [...b].map((v) => v.toString(16).padStart(2, "0")).join("");
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

const short = (s) => String(s || "").replace("TASK_STATE_", "");
const json = (value) => JSON.stringify(value, null, 2);

function badge(stateName) {
  const name = short(stateName);
  return h("span", { class: `state ${name}`, "data-state": name, text: name || "—" });
}

function setStatus(text, error = false) {
  const el = $("status");
  el.textContent = text;
  el.classList.toggle("error", error);
}

function describeError(err) {
  if (!err) return "unknown error";
  const bits = [err.type || "Error"];
  if (err.code !== undefined) bits.push(`(${err.code}${err.reason ? " " + err.reason : ""})`);
  return `${bits.join(" ")}: ${err.message || ""}`;
}

// --- the inspector API ---------------------------------------------------------------------------------------

class InspectorError extends Error {
  constructor(error) {
    super(describeError(error));
    this.error = error;
  }
}

function sessionPayload() {
  const s = state.session;
  return { url: s.url, transport: s.transport, version: s.version, headers: s.headers.filter(([n]) => n.trim()) };
}

function request(path, body, signal) {
  return fetch(`api/${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Relaykit-Inspector": "1" },
    body: JSON.stringify({ ...body, session: sessionPayload() }),
    signal,
  });
}

async function api(path, body = {}) {
  const res = await request(path, body);
  let data;
  try {
    data = await res.json();
  } catch {
    throw new InspectorError({ type: "InspectorError", message: `the inspector answered HTTP ${res.status}` });
  }
  if (!res.ok) throw new InspectorError(data.error);
  return data;
}

// NDJSON lines of a streaming API answer, as they arrive.
async function* lines(path, body, signal) {
  const res = await request(path, body, signal);
  if (!res.ok) {
    const data = await res.json().catch(() => ({}));
    throw new InspectorError(data.error || { type: "InspectorError", message: `HTTP ${res.status}` });
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 1);
        if (line.trim()) yield JSON.parse(line);
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// One unary operation; its answer goes on the timeline of the task it concerns.
async function call(op, params, taskHint, sink) {
  const answer = await api("call", { op, params });
  if (sink && answer.binding) sink.binding(answer.binding);
  const result = answer.result;
  const task = taskIdOf(result) || taskHint;
  record(task, { kind: `${op} response`, raw: answer.error ? { error: answer.error } : result, time: answer.time });
  if (answer.error) throw new InspectorError(answer.error);
  return result;
}

// --- events ----------------------------------------------------------------------------------------------------

function payloadOf(event) {
  for (const kind of ["task", "message", "statusUpdate", "artifactUpdate"]) {
    if (event && event[kind]) return [kind, event[kind]];
  }
  return [null, event];
}

function taskIdOf(value) {
  if (!value) return null;
  if (value.task) return value.task.id;
  if (value.statusUpdate) return value.statusUpdate.taskId;
  if (value.artifactUpdate) return value.artifactUpdate.taskId;
  if (value.message) return value.message.taskId || null;
  if (value.status && value.id) return value.id;
  return null;
}

function stateOf(event) {
  if (event.task) return event.task.status?.state;
  if (event.statusUpdate) return event.statusUpdate.status?.state;
  return null;
}

function textOf(parts) {
  return (parts || []).filter((p) => typeof p.text === "string").map((p) => p.text).join("");
}

function summary(kind, value) {
  switch (kind) {
    case "task":
      return `${short(value.status?.state)} · ${(value.artifacts || []).length} artifact(s)`;
    case "statusUpdate": {
      const text = textOf(value.status?.message?.parts);
      return short(value.status?.state) + (text ? ` · ${text}` : "");
    }
    case "artifactUpdate": {
      const a = value.artifact || {};
      const flags = [value.append ? "append" : "new", value.lastChunk ? "last chunk" : ""].filter(Boolean).join(", ");
      return `${a.artifactId} (${flags}): ${textOf(a.parts).slice(0, 120)}`;
    }
    case "message":
      return `${value.role === "ROLE_AGENT" ? "agent" : "user"}: ${textOf(value.parts).slice(0, 120)}`;
    default:
      return "";
  }
}

// What a unary answer was, in a line.
function resultSummary(raw) {
  const [kind, value] = payloadOf(raw);
  if (kind) return summary(kind, value);
  if (raw.error) return describeError(raw.error);
  if (raw.status && raw.id) return summary("task", raw);
  if (Array.isArray(raw.tasks)) return `${raw.tasks.length} task(s)${raw.nextPageToken ? ", more pages" : ""}`;
  if (Array.isArray(raw.configs)) return `${raw.configs.length} push config(s)`;
  if (raw.url) return `push config ${raw.id || ""} → ${raw.url}`;
  return Object.keys(raw).length ? Object.keys(raw).join(", ") : "done";
}

// --- timeline --------------------------------------------------------------------------------------------------

function record(taskId, entry) {
  const key = taskId || "(no task)";
  if (!state.timelines.has(key)) {
    state.timelines.set(key, []);
    $("tl-task").append(h("option", { value: key, text: key }));
    $("tl-task").value = key; // the newest task is the one being watched
    if (!$("view-timeline").hidden) renderTimeline();
  }
  const full = { n: ++state.seq, time: entry.time || new Date().toISOString(), ...entry };
  if (entry.event) {
    const [kind, value] = payloadOf(entry.event);
    full.kind = entry.kind || kind;
    full.summary = summary(kind, value);
    full.raw = entry.event;
  } else if (!full.summary && full.raw) {
    full.summary = resultSummary(full.raw);
  }
  state.timelines.get(key).push(full);
  if ($("tl-task").value === key && !$("view-timeline").hidden) $("timeline").tBodies[0].append(timelineRow(full));
}

function timelineRow(e) {
  return h(
    "tr",
    { "data-kind": e.kind || "" },
    h("td", { text: String(e.n) }),
    h("td", { class: "mono", title: e.time, text: e.time.slice(11, 23) || e.time }),
    h("td", { class: "sse-id", text: e.id ?? "—" }),
    h("td", {}, e.kind || "note", e.via ? h("span", { class: "muted via", text: ` (${e.via})` }) : ""),
    h("td", { text: e.summary || e.note || "" }),
    h("td", {}, e.raw ? h("details", {}, h("summary", { text: "JSON" }), h("pre", { class: "json", text: json(e.raw) })) : ""),
  );
}

function renderTimeline() {
  const body = $("timeline").tBodies[0];
  body.replaceChildren(...(state.timelines.get($("tl-task").value) || []).map(timelineRow));
}

function showTimeline(taskId) {
  if (taskId && state.timelines.has(taskId)) $("tl-task").value = taskId;
  selectTab("tab-timeline");
}

// --- parts -----------------------------------------------------------------------------------------------------

function bytesOf(b64) {
  const text = atob(b64.replace(/-/g, "+").replace(/_/g, "/"));
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}

const SHOWN_IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

function renderPart(part) {
  if (typeof part.text === "string") return h("p", { class: "part-text", text: part.text });
  if (typeof part.raw === "string") {
    const type = part.mediaType || "application/octet-stream";
    let bytes = null;
    try {
      bytes = bytesOf(part.raw);
    } catch {
      return h("p", { class: "part-text", text: `a file part whose bytes are not base64 (${part.filename || "unnamed"})` });
    }
    const url = URL.createObjectURL(new Blob([bytes], { type }));
    const name = part.filename || "file";
    return h(
      "div",
      { class: "file" },
      SHOWN_IMAGES.has(type) ? h("img", { src: url, alt: name }) : null,
      h("span", { text: `${name} · ${type} · ${bytes.length} bytes` }),
      h("a", { href: url, download: name, text: "Download" }),
    );
  }
  if (typeof part.url === "string") {
    const safe = /^https?:\/\//i.test(part.url);
    const label = `${part.filename || part.url}${part.mediaType ? " · " + part.mediaType : ""}`;
    return h("div", { class: "file" }, safe ? h("a", { href: part.url, rel: "noopener noreferrer", target: "_blank", text: label }) : h("code", { text: part.url }));
  }
  if ("data" in part) return h("pre", { class: "json part-data", text: json(part.data) });
  return h("pre", { class: "json", text: json(part) });
}

function renderParts(parts) {
  return h("div", { class: "parts" }, (parts || []).map(renderPart));
}

function renderArtifact(artifact) {
  const title = [artifact.name, artifact.description].filter(Boolean).join(" — ") || artifact.artifactId;
  return h(
    "div",
    { class: "artifact", "data-artifact": artifact.artifactId },
    h("div", { class: "artifact-name", text: `Artifact ${title}` }),
    renderParts(artifact.parts),
  );
}

function renderMessage(message, tag = "div") {
  const who = message.role === "ROLE_AGENT" ? "Agent" : "You";
  return h(tag, { class: `msg ${who === "Agent" ? "agent" : "user"}` }, h("div", { class: "msg-head" }, h("span", { class: "who", text: who })), renderParts(message.parts));
}

// --- card ------------------------------------------------------------------------------------------------------

async function connect(event) {
  if (event) event.preventDefault();
  readSessionForm();
  setStatus(`Fetching the card of ${state.session.url}…`);
  state.openapi = null;
  let report;
  try {
    report = await api("card");
  } catch (err) {
    setStatus(err.message, true);
    return;
  }
  renderCard(report);
  const errors = report.findings.filter((f) => f.level === "error").length;
  setStatus(report.card ? `Connected: ${report.card.name}${errors ? ` (${errors} finding(s) to fix)` : ""}` : "The card is not usable: see the findings", !report.card);
}

function readSessionForm() {
  state.session.url = $("target-url").value.trim();
  state.session.transport = $("transport").value;
  state.session.version = $("version").value || "1.0";
}

function renderCard(report) {
  const card = report.card;
  const raw = report.raw && typeof report.raw === "object" ? report.raw : {};
  state.card = card;
  $("card-name").textContent = (card && card.name) || raw.name || "The card is not usable";
  $("card-description").textContent = (card && card.description) || raw.description || "";
  const facts = $("card-facts");
  facts.replaceChildren();
  const versions = card ? [...new Set(card.supportedInterfaces.map((i) => i.protocolVersion))] : [];
  const add = (name, value) => value && facts.append(h("dt", { text: name }), h("dd", { text: value }));
  add("Card URL", `${report.url}${report.status ? ` · HTTP ${report.status}` : ""}${report.ms !== undefined ? ` · ${report.ms} ms` : ""}`);
  if (card) {
    const caps = card.capabilities || {};
    add("Agent version", card.version || "(none)");
    add("A2A versions", versions.join(", ") || "(none)");
    add("Provider", card.provider ? `${card.provider.organization} (${card.provider.url})` : "");
    add("Capabilities", `streaming: ${caps.streaming ? "yes" : "no"} · push notifications: ${caps.pushNotifications ? "yes" : "no"} · extended card: ${caps.extendedAgentCard ? "yes" : "no"}`);
    add("Input modes", (card.defaultInputModes || []).join(", "));
    add("Output modes", (card.defaultOutputModes || []).join(", "));
    add("Security", Object.keys(card.securitySchemes || {}).join(", "));
    add("Documentation", card.documentationUrl || "");
    add("Signed", (card.signatures || []).length ? `${card.signatures.length} signature(s)` : "no");
  }
  $("findings").replaceChildren(
    ...report.findings.map((f) =>
      h("li", { class: `finding ${f.level}`, "data-level": f.level },
        h("span", { class: "level", text: f.level }), h("span", { class: "where", text: f.field }), h("span", { text: f.message })),
    ),
  );
  $("interfaces").tBodies[0].replaceChildren(
    ...report.interfaces.map((i) =>
      h("tr", {}, h("td", { text: i.binding }), h("td", { text: i.url + (i.tenant ? ` (tenant ${i.tenant})` : "") }), h("td", { text: i.version }), h("td", { text: i.status }), h("td", { text: i.detail })),
    ),
  );
  $("skills").replaceChildren(
    ...((card && card.skills) || []).map((s) =>
      h("li", {}, h("strong", { text: s.name }), ` — ${s.description || ""}`, s.tags && s.tags.length ? h("span", { class: "muted", text: ` (${s.tags.join(", ")})` }) : ""),
    ),
  );
  $("card-raw").textContent = report.raw === null ? "(nothing usable was served)" : json(report.raw);
  // Versions offered by the card (the client speaks the ones in config.clientVersions; the server says so).
  const select = $("version");
  const current = select.value;
  const spoken = new Set((state.config.clientVersions || ["1.0"]).map((v) => v.split(".")[0]));
  select.replaceChildren(
    ...(versions.length ? versions : ["1.0"]).map((v) =>
      h("option", { value: v, text: spoken.has(v.split(".")[0]) ? v : `${v} (not spoken by relaykit's client yet)` }),
    ),
  );
  select.value = versions.includes(current) ? current : versions.find((v) => v.startsWith("1.")) || select.options[0].value;
  state.session.version = select.value;
  const streaming = !!(card && card.capabilities && card.capabilities.streaming);
  $("chat-stream").checked = streaming;
  $("chat-stream").disabled = !streaming;
  $("agent-line").textContent = card
    ? `${card.name} · A2A ${versions.join(", ")} · transport ${state.session.transport === "auto" ? "chosen from the card" : state.session.transport}`
    : "Not connected";
}

// --- chat ------------------------------------------------------------------------------------------------------

class AgentBubble {
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

  binding(name) {
    if (name) this.via.textContent = `via ${name}`;
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

function fileBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function composeParts() {
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

async function sendChat(event) {
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

function afterTurn(bubble, final) {
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

// Read a stream to the task's end (terminal or interrupted); when it closes early, resubscribe after the last SSE
// id, as a resuming client does, and say so on the timeline.
async function runStream(op, params, sink, lastEventId, signal) {
  let source = { op, params, lastEventId };
  let taskId = params.id || params.message?.taskId || null;
  const continuing = !!params.message?.taskId;
  let last = lastEventId;
  let final = null;
  for (let attempt = 0; ; attempt++) {
    let failure = null;
    try {
      for await (const line of lines("stream", source, signal)) {
        if (line.start) {
          if (sink.binding) sink.binding(line.binding);
        } else if (line.event) {
          const id = taskIdOf(line.event);
          if (id) taskId = id;
          if (line.id) last = line.id;
          record(taskId, { id: line.id, time: line.time, event: line.event, via: source.op });
          sink.event(line.event);
          if (state.chat.running && state.chat.running.bubble === sink && taskId) state.chat.running.taskId = taskId;
          const now = stateOf(line.event);
          // A message to an interrupted task starts with the task as it was (still INPUT_REQUIRED): that state is
          // stale until the agent reports a new one.
          const stale = continuing && line.event.task && INTERRUPTED.has(now);
          if (now && !stale) final = now;
          if (line.event.message && !taskId) final = "MESSAGE";
          if (final && (TERMINAL.has(final) || final === "MESSAGE" || (INTERRUPTED.has(final) && op !== "SubscribeToTask"))) return final;
        } else if (line.error) {
          failure = line.error;
        }
      }
    } catch (err) {
      if (signal && signal.aborted) return final;
      failure = err.error || { type: "NetworkError", message: err.message };
      if (!(failure.type || "").match(/Connection|Timeout|Network/)) throw new InspectorError(failure);
    }
    if (failure && !(failure.type || "").match(/Connection|Timeout|Reconnect/)) throw new InspectorError(failure);
    // A stream that ends at a final or interrupted state is complete; one that ends before is resumed.
    if (final && (TERMINAL.has(final) || INTERRUPTED.has(final) || final === "MESSAGE")) return final;
    if (!taskId || attempt >= RESUME_ATTEMPTS) {
      if (failure) throw new InspectorError(failure);
      return final;
    }
    record(taskId, { kind: "note", summary: `the stream closed before the task finished: resubscribing after SSE id ${last ?? "(none)"}` });
    source = { op: "SubscribeToTask", params: { id: taskId }, lastEventId: last };
  }
}

async function cancelChat() {
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

function newConversation() {
  state.chat.contextId = "";
  state.chat.pending = null;
  $("chat-pending").hidden = true;
  $("transcript").replaceChildren();
  $("chat-context").textContent = "A new conversation";
  $("chat-text").focus();
}

// --- tasks -----------------------------------------------------------------------------------------------------

async function listTasks(page) {
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

async function openTask(id) {
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

function renderTask(task) {
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

class TaskSink {
  event(event) {
    if (event.task) renderTask(event.task);
    else if (event.statusUpdate) {
      const now = event.statusUpdate.status?.state;
      $("td-state").replaceWith(Object.assign(badge(now), { id: "td-state" }));
    }
  }
}

async function resubscribe() {
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

async function cancelSelected() {
  const id = state.tasks.selected;
  try {
    renderTask(await call("CancelTask", { id }, id));
    setStatus(`Task ${id} canceled.`);
  } catch (err) {
    setStatus(`CancelTask: ${err.message}`, true);
  }
}

async function answerSelected(event) {
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

async function listPush() {
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

async function createPush(event) {
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

async function deletePush(taskId, configId) {
  try {
    await call("DeleteTaskPushNotificationConfig", { taskId, id: configId }, taskId);
    await listPush();
  } catch (err) {
    setStatus(`DeleteTaskPushNotificationConfig: ${err.message}`, true);
  }
}

// --- console ---------------------------------------------------------------------------------------------------

async function loadOpenAPI() {
  if (state.openapi || !state.card) return;
  try {
    const answer = await api("openapi");
    if (answer.error) throw new InspectorError(answer.error);
    state.openapi = answer;
  } catch (err) {
    setStatus(`OpenAPI: ${err.message}`, true);
    return;
  }
  $("con-source").textContent = state.openapi.source === "agent" ? "Operations from the agent's /openapi.json." : "Operations from relaykit's generated description of A2A 1.0 (the agent serves no /openapi.json).";
  fillOperations();
}

function operations() {
  const out = [];
  const paths = (state.openapi && state.openapi.doc.paths) || {};
  for (const [path, item] of Object.entries(paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (!op || typeof op !== "object" || !op.operationId) continue;
      out.push({ path, method: method.toUpperCase(), op, name: op["x-a2a-method"] || op.operationId });
    }
  }
  return out;
}

function fillOperations() {
  const binding = $("con-binding").value;
  const select = $("con-op");
  const seen = new Set();
  select.replaceChildren();
  operations().forEach((o, index) => {
    if (binding === "JSONRPC") {
      if (!o.op["x-a2a-method"] || seen.has(o.name)) return;
      seen.add(o.name);
      select.append(h("option", { value: String(index), text: o.name }));
    } else {
      select.append(h("option", { value: String(index), text: `${o.op.operationId} — ${o.method} ${o.path}` }));
    }
  });
  fillRequest();
}

function resolve(schema) {
  const schemas = state.openapi.doc.components?.schemas || {};
  let depth = 0;
  while (schema && schema.$ref && depth++ < 20) schema = schemas[schema.$ref.split("/").pop()];
  return schema;
}

// A minimal valid-looking value for a schema: required members only, placeholders for ids.
function example(schema, name, depth = 0) {
  schema = resolve(schema);
  if (!schema || depth > 8) return null;
  if (name === "messageId") return uuid();
  if (name === "parts") return [{ text: "hello" }];
  if (name === "id" || name === "taskId") return state.tasks.selected || "";
  if (schema.anyOf) return example(schema.anyOf.find((s) => s.type !== "null"), name, depth);
  if (schema.enum) return schema.enum.find((v) => !String(v).endsWith("UNSPECIFIED")) ?? schema.enum[0];
  if (schema.type === "object" || schema.properties) {
    const out = {};
    for (const key of schema.required || []) out[key] = example(schema.properties?.[key], key, depth + 1);
    return out;
  }
  if (schema.type === "array") return [];
  if (schema.type === "integer" || schema.type === "number") return schema.minimum ?? 0;
  if (schema.type === "boolean") return false;
  if (schema.type === "string") return name === "url" ? "https://example.com/webhook" : "";
  return null;
}

function fillRequest() {
  const all = operations();
  const chosen = all[parseInt($("con-op").value, 10)];
  if (!chosen) return;
  const binding = $("con-binding").value;
  const params = chosen.op.parameters || [];
  const pathParams = params.filter((p) => p.in === "path").map((p) => p.name);
  const bodySchema = chosen.op.requestBody?.content?.["application/a2a+json"]?.schema;
  if (binding === "JSONRPC") {
    const rpcParams = bodySchema ? example(bodySchema, "params") || {} : {};
    for (const name of pathParams) rpcParams[name] = state.tasks.selected || "";
    for (const p of params) if (p.in === "query" && p.required) rpcParams[p.name] = example(p.schema, p.name);
    $("con-method").value = "POST";
    $("con-path").value = "/";
    $("con-path").disabled = true;
    $("con-body").value = json({ jsonrpc: "2.0", id: 1, method: chosen.name, params: rpcParams });
  } else {
    let path = chosen.path;
    for (const name of pathParams) path = path.replace(`{${name}}`, encodeURIComponent(state.tasks.selected || `{${name}}`));
    $("con-method").value = chosen.method;
    $("con-path").value = path;
    $("con-path").disabled = false;
    $("con-body").value = bodySchema ? json(example(bodySchema, "body")) : "";
  }
}

async function sendRaw(event) {
  event.preventDefault();
  if (!state.card) {
    setStatus("Connect to an agent first.", true);
    return;
  }
  const spec = { binding: $("con-binding").value, method: $("con-method").value, path: $("con-path").value, body: $("con-body").value };
  const head = $("con-head");
  const out = $("con-response");
  head.textContent = "";
  out.textContent = "";
  try {
    for await (const line of lines("raw", { request: spec })) {
      if (line.request) head.textContent = `${line.request.method} ${line.request.url}\n`;
      else if (line.status !== undefined) head.textContent += `HTTP ${line.status} (${line.ms} ms)\n${line.headers.map(([k, v]) => `${k}: ${v}`).join("\n")}`;
      else if (line.chunk !== undefined) out.textContent += line.chunk;
      else if (line.error) out.textContent += `\n[${describeError(line.error)}]`;
    }
    try {
      out.textContent = json(JSON.parse(out.textContent));
    } catch {
      /* not one JSON document (an SSE stream, say): shown as received */
    }
  } catch (err) {
    out.textContent = err.message;
  }
}

// --- headers panel ---------------------------------------------------------------------------------------------

function renderHeaders() {
  const rows = $("header-rows");
  rows.replaceChildren(
    ...state.session.headers.map(([name, value], index) => {
      const nameInput = h("input", { "aria-label": `Header ${index + 1} name`, value: name, spellcheck: "false", placeholder: "Authorization" });
      const valueInput = h("input", { "aria-label": `Header ${index + 1} value`, value, spellcheck: "false", placeholder: "Bearer …" });
      nameInput.addEventListener("input", () => { state.session.headers[index][0] = nameInput.value; countHeaders(); });
      valueInput.addEventListener("input", () => { state.session.headers[index][1] = valueInput.value; });
      const remove = h("button", { type: "button", text: "Remove", "aria-label": `Remove header ${index + 1}` });
      remove.addEventListener("click", () => { state.session.headers.splice(index, 1); renderHeaders(); });
      return h("div", { class: "header-row" }, nameInput, valueInput, remove);
    }),
  );
  countHeaders();
}

function countHeaders() {
  $("headers-toggle").textContent = `Headers (${state.session.headers.filter(([n]) => n.trim()).length})`;
}

// --- tabs ------------------------------------------------------------------------------------------------------

function selectTab(id, focus = true) {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  for (const tab of tabs) {
    const selected = tab.id === id;
    tab.setAttribute("aria-selected", String(selected));
    tab.tabIndex = selected ? 0 : -1;
    $(tab.getAttribute("aria-controls")).hidden = !selected;
    if (selected && focus) tab.focus();
  }
  if (id === "tab-timeline") renderTimeline();
  if (id === "tab-console") loadOpenAPI();
  if (id === "tab-tasks" && state.card && !$("task-list").tBodies[0].rows.length) listTasks(0);
}

function tabKeys(event) {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  const index = tabs.indexOf(event.target);
  let next = null;
  if (event.key === "ArrowRight") next = tabs[(index + 1) % tabs.length];
  else if (event.key === "ArrowLeft") next = tabs[(index - 1 + tabs.length) % tabs.length];
  else if (event.key === "Home") next = tabs[0];
  else if (event.key === "End") next = tabs[tabs.length - 1];
  if (next) {
    event.preventDefault();
    selectTab(next.id);
  }
}

// --- start -----------------------------------------------------------------------------------------------------

async function start() {
  for (const tab of document.querySelectorAll('[role="tab"]')) {
    tab.addEventListener("click", () => selectTab(tab.id));
    tab.addEventListener("keydown", tabKeys);
  }
  $("connect").addEventListener("submit", connect);
  $("card-reload").addEventListener("click", () => connect());
  $("headers-toggle").addEventListener("click", () => {
    const panel = $("headers-panel");
    panel.hidden = !panel.hidden;
    $("headers-toggle").setAttribute("aria-expanded", String(!panel.hidden));
    if (!panel.hidden && !state.session.headers.length) {
      state.session.headers.push(["", ""]);
      renderHeaders();
    }
  });
  $("header-add").addEventListener("click", () => {
    state.session.headers.push(["", ""]);
    renderHeaders();
    const inputs = $("header-rows").querySelectorAll("input");
    inputs[inputs.length - 2].focus();
  });
  $("composer").addEventListener("submit", sendChat);
  $("chat-text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("chat-cancel").addEventListener("click", cancelChat);
  $("chat-new").addEventListener("click", newConversation);
  for (const s of STATES) $("tf-state").append(h("option", { value: s, text: short(s) }));
  $("task-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    state.tasks.tokens = [""];
    listTasks(0);
  });
  $("tasks-first").addEventListener("click", () => listTasks(0));
  $("tasks-next").addEventListener("click", () => listTasks(state.tasks.page + 1));
  $("td-refresh").addEventListener("click", () => openTask(state.tasks.selected));
  $("td-cancel").addEventListener("click", cancelSelected);
  $("td-subscribe").addEventListener("click", resubscribe);
  $("td-timeline").addEventListener("click", () => showTimeline(state.tasks.selected));
  $("td-answer").addEventListener("submit", answerSelected);
  $("td-push-new").addEventListener("submit", createPush);
  $("tp-list").addEventListener("click", listPush);
  $("tl-task").addEventListener("change", renderTimeline);
  $("tl-clear").addEventListener("click", () => {
    state.timelines.set($("tl-task").value, []);
    renderTimeline();
  });
  $("con-binding").addEventListener("change", fillOperations);
  $("con-op").addEventListener("change", fillRequest);
  $("console").addEventListener("submit", sendRaw);

  let config;
  try {
    config = await (await fetch("config.json")).json();
  } catch (err) {
    setStatus(`Cannot read the inspector's configuration: ${err.message}`, true);
    return;
  }
  state.config = config;
  $("transport").replaceChildren(h("option", { value: "auto", text: "Auto (from the card)" }), ...config.transports.map((t) => h("option", { value: t, text: t })));
  $("target-url").value = config.target || "";
  if (config.locked) {
    $("target-url").readOnly = true;
    $("target-url").title = "This inspector is mounted in its agent and inspects that agent only";
  }
  state.session.headers = config.headers.map(([n, v]) => [n, v]);
  renderHeaders();
  document.body.dataset.ready = "true";
  if (config.target) await connect();
}

start();
