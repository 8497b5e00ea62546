// Compiled (not run) by the tests: the typed calls accept what the schema says and refuse
// what it does not. Each @ts-expect-error fails the compile when its line stops being an error.
import { CtxadminClient, type Schemas } from "../src/index.js";

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function assertType<T extends true>(_value?: T): void {}

export async function typed(client: CtxadminClient): Promise<void> {
  const path = { app: "a", user: "u" };
  const session = await client.post("/api/v1/apps/{app}/users/{user}/sessions", {
    path,
    body: { session_id: "s1", state: { topic: "trips" } },
  });
  assertType<Equal<typeof session, Schemas["Session"]>>();

  const appended = await client.post("/api/v1/apps/{app}/users/{user}/sessions/{sid}/events", {
    path: { ...path, sid: "s1" },
    body: { event: { author: "user" } },
  });
  assertType<Equal<typeof appended, Schemas["AppendResponse"]>>();

  const summary = await client.get("/api/v1/apps/{app}/", { path: { app: "a" } });
  assertType<Equal<typeof summary, Schemas["AppSummary"]>>();

  for await (const item of client.paginate("/api/v1/apps/{app}/users/{user}/sessions", {
    path,
    query: { limit: 2, order: "asc" },
  })) {
    assertType<Equal<typeof item, Schemas["SessionSummary"]>>();
  }

  const deleted = await client.delete("/api/v1/apps/{app}/users/{user}/sessions/{sid}", {
    path: { ...path, sid: "s1" },
  });
  assertType<Equal<typeof deleted, undefined>>();

  // @ts-expect-error: an unknown path
  await client.get("/api/v1/nowhere");
  // @ts-expect-error: the path parameters are required
  await client.get("/api/v1/apps/{app}/");
  // @ts-expect-error: a missing path parameter
  await client.get("/api/v1/apps/{app}/users/{user}/sessions", { path: { app: "a" } });
  await client.post("/api/v1/apps/{app}/users/{user}/sessions/{sid}/events", {
    path: { ...path, sid: "s1" },
    // @ts-expect-error: an event needs its author
    body: { event: { content: null } },
  });
  await client.get("/api/v1/apps/{app}/users/{user}/sessions", {
    path,
    // @ts-expect-error: order is asc or desc
    query: { order: "sideways" },
  });
  // @ts-expect-error: sessions_get is not a cursor page
  client.paginate("/api/v1/apps/{app}/users/{user}/sessions/{sid}", { path: { ...path, sid: "s" } });
}
