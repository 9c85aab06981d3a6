// relaykit inspector: the page. Plain ES module, no dependencies, no build step.
//
// The page keeps the session (agent URL, headers, transport, version) and sends it with every call to the
// inspector's API (api/…), whose server side talks to the agent through relaykit's Client. Agent data is always
// rendered as text (textContent), never as markup.

import { $, api, h, json, onShow, renderTimeline, selectTab, setStatus, short, showTimeline, state, STATES, tabKeys } from "./core.js";
import { cancelChat, newConversation, sendChat } from "./chat.js";
import { answerSelected, cancelSelected, createPush, listPush, listTasks, openTask, resubscribe } from "./tasks.js";
import { fillOperations, fillRequest, loadOpenAPI, sendRaw } from "./console.js";

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
      h("option", { value: v, text: spoken.has(v.split(".")[0]) ? v : `${v} (not spoken by relaykit's client)` }),
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
  onShow["tab-console"] = loadOpenAPI;
  onShow["tab-tasks"] = () => {
    if (state.card && !$("task-list").tBodies[0].rows.length) listTasks(0);
  };

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
