// relaykit inspector: the Console view (raw JSON-RPC and REST requests, operations from the OpenAPI description).

import { $, api, describeError, h, InspectorError, json, lines, setStatus, state, uuid } from "./core.js";

// --- console ---------------------------------------------------------------------------------------------------

export async function loadOpenAPI() {
  if (state.openapi || !state.card) return;
  try {
    const answer = await api("openapi");
    if (answer.error) throw new InspectorError(answer.error);
    state.openapi = answer;
  } catch (err) {
    setStatus(`OpenAPI: ${err.message}`, true);
    return;
  }
  const source = state.openapi.source === "agent" ? "Operations from the agent's /openapi.json." : "Operations from relaykit's generated description of A2A 1.0 (the agent serves no /openapi.json).";
  // A 0.3 session sends to the card's 0.3 interface with no A2A-Version header: the 1.0 templates need rewriting.
  const v03 = state.session.version.startsWith("0.")
    ? " This session speaks A2A 0.3: requests go to the card's 0.3 interface without an A2A-Version header, so write them as 0.3 (message/send, /v1/message:send, kind)."
    : "";
  $("con-source").textContent = source + v03;
  fillOperations();
}

export function operations() {
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

export function fillOperations() {
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

export function resolve(schema) {
  const schemas = state.openapi.doc.components?.schemas || {};
  let depth = 0;
  while (schema && schema.$ref && depth++ < 20) schema = schemas[schema.$ref.split("/").pop()];
  return schema;
}

// A minimal valid-looking value for a schema: required members only, placeholders for ids.
export function example(schema, name, depth = 0) {
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

export function fillRequest() {
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

export async function sendRaw(event) {
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
