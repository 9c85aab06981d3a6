// @a2a-js/sdk 0.3.x's client against an A2A 0.3 server (relaykit's dual stack in the tests): send, stream, get,
// multi-turn input-required, cancel, resubscribe, push config CRUD with one delivery, one error. Prints one JSON
// report line; every step is bounded. node sdk03_client.mjs BASE_URL TRANSPORT   (A2A_JS_SDK03_DIR as for the server)
// TRANSPORT: JSONRPC, HTTP+JSON or GRPC (the SDK's gRPC transport is a separate entry point, added to the factory
// only then; it dials the card's 0.3 additionalInterfaces entry with transport "GRPC", a host:port).
import { randomUUID } from "node:crypto";
import http from "node:http";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [base, transport] = process.argv.slice(2);
const STEP = 20000;
const root = process.env.A2A_JS_SDK03_DIR;
const sdk = (entry) => import(pathToFileURL(path.join(root, "node_modules", "@a2a-js", "sdk", "dist", entry)).href);
const { ClientFactory, ClientFactoryOptions } = await sdk("client/index.js");
const extra = transport === "GRPC" ? [new (await sdk("client/transports/grpc/index.js")).GrpcTransportFactory()] : [];

const bounded = (promise, what) =>
  Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer in ${STEP} ms`)), STEP).unref())]);
const message = (text, extra = {}) => ({ kind: "message", messageId: randomUUID(), role: "user", parts: [{ kind: "text", text }], ...extra });
const collect = async (events, what) =>
  bounded((async () => { const out = []; for await (const e of events) out.push(e); return out; })(), what);
const state = (e) => e?.status?.state;

// The webhook: the first delivery resolves `delivered`.
let deliver;
const delivered = new Promise((resolve) => { deliver = resolve; });
const hook = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => { body += c; });
  req.on("end", () => { res.end(); deliver({ token: req.headers["x-a2a-notification-token"] ?? null, body: JSON.parse(body || "{}") }); });
});
await new Promise((resolve) => hook.listen(0, "127.0.0.1", resolve));
const hookUrl = `http://127.0.0.1:${hook.address().port}/hook`;

const report = {};
try {
  const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { transports: extra, preferredTransports: [transport] }));
  const client = await bounded(factory.createFromUrl(base), "card");
  report.transportClass = client.transport.constructor.name;

  const sent = await bounded(client.sendMessage({ message: message("hello") }), "send");
  report.send = { kind: sent.kind, state: state(sent), artifact: sent.artifacts?.[0]?.parts?.[0]?.text };
  const got = await bounded(client.getTask({ id: sent.id, historyLength: 1 }), "get");
  report.get = { id: got.id === sent.id, state: state(got), history: got.history?.length ?? 0 };

  const streamed = await collect(client.sendMessageStream({ message: message("stream 3") }), "stream");
  report.stream = streamed.map((e) => e.kind === "artifact-update" ? e.artifact.parts[0].text : `${e.kind}:${state(e) ?? ""}${e.final ? ":final" : ""}`);

  const asked = await bounded(client.sendMessage({ message: message("ask me") }), "ask");
  report.ask = { state: state(asked), question: asked.status?.message?.parts?.[0]?.text };
  const answered = await bounded(client.sendMessage({ message: message("Ada", { taskId: asked.id, contextId: asked.contextId }) }), "answer");
  report.answer = { sameTask: answered.id === asked.id, state: state(answered), text: JSON.stringify(answered) };

  const slow = await bounded(client.sendMessage({ message: message("slow 100"), configuration: { blocking: false } }), "slow");
  const canceled = await bounded(client.cancelTask({ id: slow.id }), "cancel");
  report.cancel = { state: state(canceled) };
  try {
    await bounded(client.cancelTask({ id: slow.id }), "cancel again");
    report.cancelAgain = "no error";
  } catch (err) {
    report.cancelAgain = err.constructor.name;
  }

  const running = await bounded(client.sendMessage({ message: message("slow 4"), configuration: { blocking: false } }), "running");
  const resubscribed = await collect(client.resubscribeTask({ id: running.id }), "resubscribe");
  const chunks = resubscribed.filter((e) => e.kind === "artifact-update").map((e) => e.artifact.parts[0].text);
  report.resubscribe = { last: state(resubscribed.at(-1)), final: resubscribed.at(-1)?.final ?? null, chunks };

  const target = await bounded(client.sendMessage({ message: message("slow 8"), configuration: { blocking: false } }), "push task");
  const set = await bounded(client.setTaskPushNotificationConfig({ taskId: target.id, pushNotificationConfig: { id: "hook-1", url: hookUrl, token: "tok-1" } }), "push set");
  const read = await bounded(client.getTaskPushNotificationConfig({ id: target.id, pushNotificationConfigId: "hook-1" }), "push get");
  const listed = await bounded(client.listTaskPushNotificationConfig({ id: target.id }), "push list");
  const delivery = await bounded(delivered, "push delivery");
  await bounded(client.deleteTaskPushNotificationConfig({ id: target.id, pushNotificationConfigId: "hook-1" }), "push delete");
  const after = await bounded(client.listTaskPushNotificationConfig({ id: target.id }), "push list after delete");
  report.push = {
    set: [set.taskId === target.id, set.pushNotificationConfig.id, set.pushNotificationConfig.url === hookUrl],
    get: [read.pushNotificationConfig.id, read.pushNotificationConfig.token],
    list: listed.map((c) => c.pushNotificationConfig.id),
    delivery: { token: delivery.token, kind: delivery.body.kind ?? null, id: delivery.body.id === target.id },
    after: after.length,
  };
  await bounded(client.cancelTask({ id: target.id }), "push task cancel");

  try {
    await bounded(client.getTask({ id: "no-such-task" }), "missing");
    report.missing = "no error";
  } catch (err) {
    report.missing = err.constructor.name;
  }
} catch (err) {
  report.error = String(err?.stack ?? err);
} finally {
  hook.close();
}
console.log(JSON.stringify(report));
process.exit(0);
