// The CommonJS build loads with require() and calls the live stack like the ES one.
const assert = require("node:assert/strict");
const { test } = require("node:test");

const esm = import("../dist/esm/index.js");
const cjs = require("../dist/cjs/index.js");

test("the CommonJS build exports what the ES build does, and calls the stack", async () => {
  assert.deepEqual(Object.keys(cjs).sort(), Object.keys(await esm).sort());
  const { live } = await import("./live.mjs");
  const { baseUrl, apiKey, app, user } = live();
  const client = new cjs.CtxadminClient({ baseUrl, apiKey });
  const session = await client.post("/api/v1/apps/{app}/users/{user}/sessions", {
    path: { app, user },
    body: { session_id: "from-cjs" },
  });
  assert.equal(session.session_id, "from-cjs");
  const missing = await client
    .get("/api/v1/apps/{app}/users/{user}/sessions/{sid}", { path: { app, user, sid: "none" } })
    .then(() => null, (error) => error);
  assert.ok(missing instanceof cjs.NotFoundError, String(missing));
  assert.equal(missing.code, "not_found");
});
