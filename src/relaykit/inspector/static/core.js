// relaykit inspector: what every view shares — DOM helpers, the page state, the inspector API, events and
// the timeline, rendering of parts, streams (with resume) and the tabs. Agent data is rendered as text, never markup.

export const $ = (id) => document.getElementById(id);

export const TERMINAL = new Set(["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"]);
export const INTERRUPTED = new Set(["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"]);
export const STATES = [
  "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED",
  "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
];
export const RESUME_ATTEMPTS = 3;

export const state = {
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

export function h(tag, attrs = {}, ...children) {
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

export function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = [...b].map((v) => v.toString(16).padStart(2, "0")).join("");
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

export const short = (s) => String(s || "").replace("TASK_STATE_", "");
export const json = (value) => JSON.stringify(value, null, 2);

export function badge(stateName) {
  const name = short(stateName);
  return h("span", { class: `state ${name}`, "data-state": name, text: name || "—" });
}

export function setStatus(text, error = false) {
  const el = $("status");
  el.textContent = text;
  el.classList.toggle("error", error);
}

export function describeError(err) {
  if (!err) return "unknown error";
  const bits = [err.type || "Error"];
  if (err.code !== undefined) bits.push(`(${err.code}${err.reason ? " " + err.reason : ""})`);
  return `${bits.join(" ")}: ${err.message || ""}`;
}

// --- the inspector API ---------------------------------------------------------------------------------------

export class InspectorError extends Error {
  constructor(error) {
    super(describeError(error));
    this.error = error;
  }
}

export function sessionPayload() {
  const s = state.session;
  return { url: s.url, transport: s.transport, version: s.version, headers: s.headers.filter(([n]) => n.trim()) };
}

export function request(path, body, signal) {
  return fetch(`api/${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Relaykit-Inspector": "1" },
    body: JSON.stringify({ ...body, session: sessionPayload() }),
    signal,
  });
}

export async function api(path, body = {}) {
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
export async function* lines(path, body, signal) {
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
export async function call(op, params, taskHint, sink) {
  const answer = await api("call", { op, params });
  if (sink && answer.binding) sink.binding(answer.binding, answer.version);
  const result = answer.result;
  const task = taskIdOf(result) || taskHint;
  record(task, { kind: `${op} response`, raw: answer.error ? { error: answer.error } : result, wire: answer.wire, time: answer.time });
  if (answer.error) throw new InspectorError(answer.error);
  return result;
}

// --- events ----------------------------------------------------------------------------------------------------

export function payloadOf(event) {
  for (const kind of ["task", "message", "statusUpdate", "artifactUpdate"]) {
    if (event && event[kind]) return [kind, event[kind]];
  }
  return [null, event];
}

export function taskIdOf(value) {
  if (!value) return null;
  if (value.task) return value.task.id;
  if (value.statusUpdate) return value.statusUpdate.taskId;
  if (value.artifactUpdate) return value.artifactUpdate.taskId;
  if (value.message) return value.message.taskId || null;
  if (value.status && value.id) return value.id;
  return null;
}

export function stateOf(event) {
  if (event.task) return event.task.status?.state;
  if (event.statusUpdate) return event.statusUpdate.status?.state;
  return null;
}

export function textOf(parts) {
  return (parts || []).filter((p) => typeof p.text === "string").map((p) => p.text).join("");
}

export function summary(kind, value) {
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
export function resultSummary(raw) {
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

export function record(taskId, entry) {
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

export function timelineRow(e) {
  return h(
    "tr",
    { "data-kind": e.kind || "" },
    h("td", { text: String(e.n) }),
    h("td", { class: "mono", title: e.time, text: e.time.slice(11, 23) || e.time }),
    h("td", { class: "sse-id", text: e.id ?? "—" }),
    h("td", {}, e.kind || "note", e.via ? h("span", { class: "muted via", text: ` (${e.via})` }) : ""),
    h("td", { text: e.summary || e.note || "" }),
    h("td", {},
      e.raw ? h("details", {}, h("summary", { text: "JSON" }), h("pre", { class: "json", text: json(e.raw) })) : "",
      // What the agent sent, before the client decoded it (for a 0.3 agent: the 0.3 shape).
      e.wire !== undefined ? h("details", { class: "wire" }, h("summary", { text: "As sent" }), h("pre", { class: "json wire", text: json(e.wire) })) : ""),
  );
}

export function renderTimeline() {
  const body = $("timeline").tBodies[0];
  body.replaceChildren(...(state.timelines.get($("tl-task").value) || []).map(timelineRow));
}

export function showTimeline(taskId) {
  if (taskId && state.timelines.has(taskId)) $("tl-task").value = taskId;
  selectTab("tab-timeline");
}

// --- parts -----------------------------------------------------------------------------------------------------

export function bytesOf(b64) {
  const text = atob(b64.replace(/-/g, "+").replace(/_/g, "/"));
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}

export const SHOWN_IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

export function renderPart(part) {
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

export function renderParts(parts) {
  return h("div", { class: "parts" }, (parts || []).map(renderPart));
}

export function renderArtifact(artifact) {
  const title = [artifact.name, artifact.description].filter(Boolean).join(" — ") || artifact.artifactId;
  return h(
    "div",
    { class: "artifact", "data-artifact": artifact.artifactId },
    h("div", { class: "artifact-name", text: `Artifact ${title}` }),
    renderParts(artifact.parts),
  );
}

export function renderMessage(message, tag = "div") {
  const who = message.role === "ROLE_AGENT" ? "Agent" : "You";
  return h(tag, { class: `msg ${who === "Agent" ? "agent" : "user"}` }, h("div", { class: "msg-head" }, h("span", { class: "who", text: who })), renderParts(message.parts));
}

// --- streams -------------------------------------------------------------------------------------------------
// Read a stream to the task's end (terminal or interrupted); when it closes early, resubscribe after the last SSE
// id, as a resuming client does, and say so on the timeline.
export async function runStream(op, params, sink, lastEventId, signal) {
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
          if (sink.binding) sink.binding(line.binding, line.version);
        } else if (line.event) {
          const id = taskIdOf(line.event);
          if (id) taskId = id;
          if (line.id) last = line.id;
          record(taskId, { id: line.id, time: line.time, event: line.event, wire: line.wire, via: source.op });
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

// --- tabs ------------------------------------------------------------------------------------------------------

export function selectTab(id, focus = true) {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  for (const tab of tabs) {
    const selected = tab.id === id;
    tab.setAttribute("aria-selected", String(selected));
    tab.tabIndex = selected ? 0 : -1;
    $(tab.getAttribute("aria-controls")).hidden = !selected;
    if (selected && focus) tab.focus();
  }
  if (onShow[id]) onShow[id]();
}

// What a view does when it is shown (each view module registers itself; the timeline is rendered here).
export const onShow = { "tab-timeline": () => renderTimeline() };

export function tabKeys(event) {
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
