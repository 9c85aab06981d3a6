// An A2A 0.3 agent on @a2a-js/sdk 0.3.x: JSON-RPC at "/" and HTTP+JSON at the root ("/v1/...") on express, the 0.3
// gRPC service (@grpc/grpc-js) on GRPC_PORT, the same kitchen behaviour as ../sdk03_server.py, for relaykit's client
// tests. Prints "ready" once both listen (the HTTP side, which serves the card, starts last).
//   node sdk03_server.mjs PORT GRPC_PORT   (A2A_JS_SDK03_DIR: the directory whose node_modules holds the SDK, express
//   and @grpc/grpc-js)
// ESM on purpose: the SDK's CommonJS build gives its server and express entry points two different A2AError classes,
// so every error (task not found, …) leaves the express handlers as -32603; its ESM build shares one.
import { randomUUID } from "node:crypto";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";

const root = process.env.A2A_JS_SDK03_DIR;
const sdk = (entry) => import(pathToFileURL(path.join(root, "node_modules", "@a2a-js", "sdk", "dist", entry)).href);
const load = createRequire(path.join(root, "package.json"));
const express = load("express");
const grpc = load("@grpc/grpc-js");
const { DefaultRequestHandler, InMemoryTaskStore, InMemoryPushNotificationStore } = await sdk("server/index.js");
const { agentCardHandler, jsonRpcHandler, restHandler, UserBuilder } = await sdk("server/express/index.js");
const grpcSdk = await sdk("server/grpc/index.js");

const [port, grpcPort] = process.argv.slice(2).map(Number);
const base = `http://127.0.0.1:${port}`;
const card = {
  name: "a2a-js 0.3 kitchen",
  description: "@a2a-js/sdk 0.3 test agent",
  protocolVersion: "0.3.0",
  version: "1.0.0",
  url: base + "/",
  preferredTransport: "JSONRPC",
  additionalInterfaces: [
    { url: base + "/", transport: "JSONRPC" },
    { url: base, transport: "HTTP+JSON" },
    { url: `127.0.0.1:${grpcPort}`, transport: "GRPC" }, // a gRPC target (host:port), as both SDKs dial it
  ],
  capabilities: { streaming: true, pushNotifications: true },
  defaultInputModes: ["text/plain"],
  defaultOutputModes: ["text/plain"],
  skills: [{ id: "echo", name: "echo", description: "echoes", tags: ["echo"] }],
};

const text = (t) => [{ kind: "text", text: t }];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const canceled = new Set();

class Kitchen {
  async execute(ctx, bus) {
    const { taskId, contextId, task } = ctx;
    const input = ctx.userMessage.parts.filter((p) => p.kind === "text").map((p) => p.text).join("");
    const status = (state, final, message) =>
      bus.publish({ kind: "status-update", taskId, contextId, final, status: { state, message, timestamp: new Date().toISOString() } });
    const artifact = (id, t, append, lastChunk) =>
      bus.publish({ kind: "artifact-update", taskId, contextId, append, lastChunk, artifact: { artifactId: id, name: id, parts: text(t) } });
    if (!task && input.startsWith("message ")) {
      bus.publish({ kind: "message", messageId: randomUUID(), role: "agent", contextId, parts: text("you said: " + input.slice(8)) });
      bus.finished();
      return;
    }
    if (!task) {
      bus.publish({ kind: "task", id: taskId, contextId, status: { state: "submitted" }, history: [ctx.userMessage] });
    }
    if (task && task.status.state === "input-required") {
      artifact("answer", "got: " + input, false, true);
      status("completed", true);
    } else if (input.startsWith("ask")) {
      status("input-required", true, { kind: "message", messageId: randomUUID(), role: "agent", taskId, contextId, parts: text("What is your name?") });
    } else {
      const found = /^(stream|slow) (\d+)/.exec(input);
      if (found) {
        const [label, n, delay] = [found[1] === "stream" ? "chunk" : "slow", Number(found[2]), found[1] === "slow" ? 200 : 0];
        status("working", false);
        for (let i = 0; i < n; i++) {
          if (delay) await sleep(delay);
          if (canceled.has(taskId)) return; // cancelTask published the end
          artifact(label, `${label} ${i}`, i > 0, i === n - 1);
        }
      } else {
        artifact("echo", input, false, true);
      }
      status("completed", true);
    }
    bus.finished();
  }

  async cancelTask(taskId, bus) {
    canceled.add(taskId);
    bus.publish({ kind: "status-update", taskId, contextId: "", final: true, status: { state: "canceled" } });
    bus.finished();
  }
}

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new Kitchen(), undefined, new InMemoryPushNotificationStore());
const app = express();
const options = { requestHandler: handler, userBuilder: UserBuilder.noAuthentication };
app.use("/.well-known/agent-card.json", agentCardHandler({ agentCardProvider: handler }));
app.use(restHandler(options));
app.post("/", jsonRpcHandler(options));
const grpcServer = new grpc.Server();
grpcServer.addService(grpcSdk.A2AService, grpcSdk.grpcService({ requestHandler: handler, userBuilder: grpcSdk.UserBuilder.noAuthentication }));
await new Promise((resolve, reject) =>
  grpcServer.bindAsync(`127.0.0.1:${grpcPort}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
);
app.listen(port, "127.0.0.1", () => console.log("ready"));
