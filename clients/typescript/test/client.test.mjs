// The ES module build against the live stack: a session's create, append, context and
// memory search round trip, pagination, and the typed errors of real answers.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AuthenticationError,
  CtxadminClient,
  NotFoundError,
  StaleSessionError,
  ValidationError,
} from "../dist/esm/index.js";
import { live } from "./live.mjs";

const { baseUrl, apiKey, app, user } = live();
const client = new CtxadminClient({ baseUrl, apiKey });
const SESSIONS = "/api/v1/apps/{app}/users/{user}/sessions";
const SESSION = "/api/v1/apps/{app}/users/{user}/sessions/{sid}";

test("a session's create, append, context and memory search round trip", async () => {
  const path = { app, user, sid: "trip" };
  const session = await client.post(SESSIONS, {
    path: { app, user },
    body: { session_id: "trip", state: { topic: "trips" } },
  });
  assert.equal(session.session_id, "trip");
  assert.equal(session.revision, 0);
  assert.deepEqual(session.state, { topic: "trips" });

  const event = {
    author: "user",
    event_id: "e1",
    content: { role: "user", parts: [{ text: "Book a window seat to Lisbon" }] },
    actions: { state_delta: { seat: "window" } },
  };
  const appended = await client.post(`${SESSION}/events`, {
    path,
    body: { event, expected_revision: 0 },
  });
  assert.equal(appended.created, 1);
  assert.equal(appended.revision, 1);
  assert.deepEqual(appended.state, { topic: "trips", seat: "window" });
  assert.deepEqual(appended.events[0].actions.state_delta, { seat: "window" });

  const replayed = await client.post(`${SESSION}/events`, { path, body: { event } });
  assert.equal(replayed.created, 0);

  const context = await client.post(`${SESSION}/context`, {
    path,
    body: { current_input: { role: "user", parts: [{ text: "which seat?" }] } },
  });
  assert.deepEqual(
    context.envelope.history.map((item) => item.content.parts[0].text),
    ["Book a window seat to Lisbon"],
  );
  assert.match(context.context_fingerprint, /^[0-9a-f]{64}$/);

  await client.post("/api/v1/apps/{app}/users/{user}/memories", {
    path: { app, user },
    body: { content: "Alice prefers window seats" },
  });
  const found = await client.post("/api/v1/apps/{app}/users/{user}/memories/search", {
    path: { app, user },
    body: { query: "window seats", mode: "lexical" },
  });
  assert.deepEqual(
    found.hits.map((hit) => hit.content),
    ["Alice prefers window seats"],
  );

  const read = await client.get(SESSION, { path, query: { num_recent_events: 0 } });
  assert.equal(read.event_count, 1);
  assert.deepEqual(read.events, []);

  assert.equal(await client.delete(SESSION, { path }), undefined);
  await assert.rejects(client.get(SESSION, { path }), NotFoundError);
});

test("paginate walks every page of a list", async () => {
  const owner = `${user}-pages`;
  const made = [];
  for (let index = 0; index < 5; index++) {
    const session = await client.post(SESSIONS, { path: { app, user: owner }, body: {} });
    made.push(session.session_id);
  }
  const seen = [];
  for await (const summary of client.paginate(SESSIONS, {
    path: { app, user: owner },
    query: { limit: 2, order: "asc" },
  })) {
    seen.push(summary.session_id);
  }
  assert.deepEqual(seen.toSorted(), made.toSorted());
  assert.equal(new Set(seen).size, 5);
});

test("error answers become typed errors carrying the envelope", async () => {
  const path = { app, user, sid: "errors" };
  await client.post(SESSIONS, { path: { app, user }, body: { session_id: "errors" } });
  await client.post(`${SESSION}/events`, { path, body: { event: { author: "user" } } });

  const stale = await client
    .post(`${SESSION}/events`, { path, body: { event: { author: "user" }, expected_revision: 0 } })
    .then(() => null, (error) => error);
  assert.ok(stale instanceof StaleSessionError, String(stale));
  assert.equal(stale.status, 409);
  assert.equal(stale.code, "stale_session");

  const invalid = await client
    .post(`${SESSION}/events`, { path, body: { event: { author: "user", colour: 1 } } })
    .then(() => null, (error) => error);
  assert.ok(invalid instanceof ValidationError, String(invalid));
  assert.equal(invalid.status, 400);
  assert.equal(typeof invalid.message, "string");
  assert.equal(typeof invalid.details, "object");

  const stranger = new CtxadminClient({ baseUrl, apiKey: "ctx_unknown000_" + "x".repeat(43) });
  const refused = await stranger
    .get(SESSION, { path })
    .then(() => null, (error) => error);
  assert.ok(refused instanceof AuthenticationError, String(refused));
  assert.equal(refused.status, 401);
});

test("a fact's versions: a keyed add supersedes, reads at a valid time, history and rollback", async () => {
  const owner = `${user}-facts`;
  const MEMORIES = "/api/v1/apps/{app}/users/{user}/memories";
  const MEMORY = `${MEMORIES}/{memory_id}`;
  const aisle = await client.post(MEMORIES, {
    path: { app, user: owner },
    body: { content: "aisle seat", key: "preference.seat", valid_from: "2026-01-01T00:00:00Z" },
  });
  const window = await client.post(MEMORIES, {
    path: { app, user: owner },
    body: { content: "window seat", key: "preference.seat", valid_from: "2026-06-01T00:00:00Z" },
  });
  assert.equal(window.supersedes, aisle.id);
  const search = (body) =>
    client.post(`${MEMORIES}/search`, {
      path: { app, user: owner },
      body: { query: "seat", mode: "lexical", ...body },
    });
  assert.deepEqual((await search({})).hits.map((hit) => hit.content), ["window seat"]);
  assert.deepEqual(
    (await search({ as_of: "2026-03-01T00:00:00Z" })).hits.map((hit) => hit.content),
    ["aisle seat"],
  );
  const history = await client.get(`${MEMORY}/history`, {
    path: { app, user: owner, memory_id: window.id },
  });
  assert.deepEqual(
    history.versions.map((version) => version.content),
    ["aisle seat", "window seat"],
  );
  const restored = await client.post(`${MEMORY}/rollback`, {
    path: { app, user: owner, memory_id: aisle.id },
  });
  assert.equal(restored.content, "aisle seat");
  assert.equal(restored.supersedes, window.id);
  const refused = await client
    .post(`${MEMORY}/rollback`, { path: { app, user: owner, memory_id: restored.id } })
    .then(() => null, (error) => error);
  assert.equal(refused.status, 409);
  assert.equal(refused.code, "memory_version_live");
});
