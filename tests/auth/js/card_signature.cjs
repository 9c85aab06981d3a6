// Signs, verifies or canonicalises an agent card with @a2a-js/sdk, for tests/auth/test_card_signing_js.py.
// Usage: node card_signature.cjs sign|verify|canonical < {"card": …, "jwk": …, "alg": "ES256", "kid": "k1"}
// The SDK is loaded from A2A_JS_SDK_DIR (a directory whose node_modules holds @a2a-js/sdk and jose).
const { createRequire } = require("node:module");
const path = require("node:path");
const load = createRequire(path.join(process.env.A2A_JS_SDK_DIR, "index.js"));
const sdk = load("@a2a-js/sdk");
const jose = load("jose");

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const input = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  const mode = process.argv[2];
  if (mode === "canonical") {
    process.stdout.write(sdk.canonicalizeAgentCard(input.card));
    return;
  }
  const key = await jose.importJWK(input.jwk, input.alg);
  if (mode === "sign") {
    const header = { alg: input.alg, kid: input.kid, typ: "JOSE" };
    const signed = await sdk.generateAgentCardSignature(key, header)(input.card);
    process.stdout.write(JSON.stringify(signed));
  } else if (mode === "verify") {
    console.debug = () => {};
    await sdk.verifyAgentCardSignature(async () => key)(input.card);
    process.stdout.write("verified");
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
}

main().catch((error) => {
  process.stderr.write(String(error && error.message ? error.message : error));
  process.exit(1);
});
