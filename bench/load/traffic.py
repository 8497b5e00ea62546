"""The load itself: client threads sending the request mix to shared sessions and users, and
the ledger of everything acknowledged."""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.load.client import Call, Client, now, outcome_of
from bench.load.figures import errors_by_kind
from bench.load.plan import (
    BACKOFF_503_SECONDS,
    BATCH_EVENTS,
    CLIENTS,
    COMPACTION_TOKENS,
    CONTEXT_POLICY,
    SEED_EVENTS,
    SEED_MEMORIES,
    SESSIONS_PER_USER,
    USERS,
    WORDS,
)


def words(rng: random.Random, low: int, high: int) -> str:
    target, out, size = rng.randint(low, high), [], 0
    while size < target:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


@dataclass
class SessionLedger:
    """What the service acknowledged for one session."""

    acked: dict[str, int] = field(default_factory=dict)  # event_id -> seq
    texts: set[str] = field(default_factory=set)  # acknowledged event ids with a text part
    unacked: list[tuple[list[str], str]] = field(default_factory=list)  # (ids, outcome)
    admitted: int = 0  # the last seq of the last acknowledged admission
    admission: threading.Lock = field(default_factory=threading.Lock)


class Workload:
    """One run's users, sessions, clients and what the service acknowledged to them."""

    def __init__(self, base_url: str, key: str, app: str, prefix: str, mix, budget: int):
        self.base_url, self.key, self.app, self.prefix = base_url, key, app, prefix
        self.mix = mix
        self.budget = budget
        self.users = [f"{prefix}-u{n}" for n in range(USERS)]
        self.sessions = [(u, f"s{k}") for u in self.users for k in range(SESSIONS_PER_USER)]
        self.ledger = {key_: SessionLedger() for key_ in self.sessions}
        self.memories: dict[str, str] = {}  # acknowledged memory id -> user
        self.memory_keys: set[str] = set()  # their idempotency keys
        self.jobs: set[str] = set()
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.sent = 0
        self.start = self.end = self.stop_at = 0.0
        self.in_flight: dict[int, tuple[int, float]] = {}  # client -> (local port, since)

    # -- paths

    def user_url(self, user: str) -> str:
        return f"/api/v1/apps/{self.app}/users/{user}"

    def session_url(self, user: str, sid: str) -> str:
        return f"{self.user_url(user)}/sessions/{sid}"

    # -- events

    @staticmethod
    def text_event(rng: random.Random, event_id: str) -> dict:
        author = rng.choice(("user", "load_agent"))
        event = {
            "event_id": event_id,
            "invocation_id": f"inv-{event_id}",
            "author": author,
            "content": {
                "role": "user" if author == "user" else "model",
                "parts": [{"text": words(rng, 150, 500)}],
            },
        }
        if rng.random() < 0.1:
            event["actions"] = {
                "state_delta": {"topic": rng.choice(WORDS), "user:seen": rng.randint(1, 99)}
            }
        return event

    @staticmethod
    def tool_events(rng: random.Random, event_id: str) -> list[dict]:
        call_id = f"call-{event_id}"
        name = rng.choice(("search_docs", "lookup_order"))
        return [
            {
                "event_id": f"{event_id}-c",
                "invocation_id": f"inv-{event_id}",
                "author": "load_agent",
                "content": {
                    "role": "model",
                    "parts": [
                        {"function_call": {"id": call_id, "name": name, "args": {"q": "status"}}}
                    ],
                },
            },
            {
                "event_id": f"{event_id}-r",
                "invocation_id": f"inv-{event_id}",
                "author": "load_agent",
                "content": {
                    "role": "user",
                    "parts": [
                        {
                            "function_response": {
                                "id": call_id,
                                "name": name,
                                "response": {"result": words(rng, 100, 300)},
                            }
                        }
                    ],
                },
            },
        ]

    # -- one request

    def take(self) -> bool:
        with self.lock:
            if self.sent >= self.budget:
                return False
            self.sent += 1
            return True

    def call(self, client: Client, endpoint: str, method: str, path: str, body, slot: int):
        """Send one request and record it; the parsed body when it was the expected 2xx."""
        if endpoint == "append_batch" and slot >= 0:
            self.in_flight[slot] = (client.connect(), now())
        start = now()
        try:
            status, answer, retry_after = client.request(method, path, body)
            outcome = outcome_of(endpoint, status, answer, retry_after)
        except TimeoutError:
            outcome, answer = "connection timeout", None
        except (OSError, http.client.HTTPException) as exc:
            outcome, answer = f"connection {type(exc).__name__}", None
        finally:
            self.in_flight.pop(slot, None)
        end = now()
        with self.lock:
            self.calls.append(Call(endpoint, start, end, outcome))
        if outcome.startswith("http 503"):
            time.sleep(BACKOFF_503_SECONDS)
        return answer if outcome == "ok" else None, outcome

    # -- operations

    def op_append(self, client, rng, slot, counter, batch: int = 0) -> None:
        key = rng.choice(self.sessions)
        base = f"{self.prefix}-{slot}-{next(counter)}"
        if batch:
            events = [self.text_event(rng, f"{base}-{n}") for n in range(batch)]
        elif rng.random() < 0.2:
            events = self.tool_events(rng, base)
        else:
            events = [self.text_event(rng, base)]
        self.append(client, key, events, "append_batch" if batch else "append", slot)

    def append(self, client, key, events: list[dict], endpoint: str, slot: int) -> None:
        body = {"event": events[0]} if len(events) == 1 else {"events": events}
        answer, outcome = self.call(
            client, endpoint, "POST", f"{self.session_url(*key)}/events", body, slot
        )
        ledger = self.ledger[key]
        with self.lock:
            if answer is None:
                ledger.unacked.append(([e["event_id"] for e in events], outcome))
                return
            for stored in answer["events"]:
                ledger.acked[stored["event_id"]] = stored["seq"]
            ledger.texts.update(
                e["event_id"] for e in events if any("text" in p for p in e["content"]["parts"])
            )

    def op_context(self, client, rng, slot, counter) -> None:
        user, sid = rng.choice(self.sessions)
        body = {
            "current_input": {"role": "user", "parts": [{"text": words(rng, 40, 120)}]},
            "policy": CONTEXT_POLICY,
        }
        self.call(client, "context", "POST", f"{self.session_url(user, sid)}/context", body, slot)

    def op_memory_search(self, client, rng, slot, counter) -> None:
        user = rng.choice(self.users)
        body = {"query": " ".join(rng.sample(WORDS, 3)), "mode": "hybrid", "limit": 10}
        self.call(
            client, "memory_search", "POST", f"{self.user_url(user)}/memories/search", body, slot
        )

    def op_memory_add(self, client, rng, slot, counter) -> None:
        user = rng.choice(self.users)
        idempotency_key = f"{self.prefix}-m-{slot}-{next(counter)}"
        body = {
            "content": words(rng, 60, 300),
            "metadata": {"source": "load"},
            "idempotency_key": idempotency_key,
        }
        answer, _outcome = self.call(
            client, "memory_add", "POST", f"{self.user_url(user)}/memories", body, slot
        )
        if answer is not None:
            with self.lock:
                self.memories[answer["id"]] = user
                self.memory_keys.add(idempotency_key)

    def op_ingest(self, client, rng, slot, counter) -> None:
        """Admit a session's events after its last acknowledged admission: one admitter per
        session at a time, so the jobs of a session never overlap."""
        key = rng.choice(self.sessions)
        ledger = self.ledger[key]
        if not ledger.admission.acquire(blocking=False):
            return self.op_append(client, rng, slot, counter)
        try:
            with self.lock:
                newest = max(ledger.acked.values(), default=0)
            if newest <= ledger.admitted:
                return self.op_append(client, rng, slot, counter)
            user, sid = key
            body = {"session_id": sid, "after_seq": ledger.admitted}
            answer, _outcome = self.call(
                client,
                "ingest_admit",
                "POST",
                f"{self.user_url(user)}/memories/ingestions",
                body,
                slot,
            )
            if answer is not None:
                with self.lock:
                    ledger.admitted = answer["last_seq"]
                    self.jobs.add(answer["job_id"])
        finally:
            ledger.admission.release()

    # -- running

    def seed(self) -> None:
        """The run's sessions with ``SEED_EVENTS`` events each and ``SEED_MEMORIES`` memories
        per user, through the API (checked like the rest)."""
        client = Client(self.base_url, self.key)
        rng = random.Random(self.prefix)  # noqa: S311 - a reproducible load, not secrets
        for user, sid in self.sessions:
            client.send("POST", f"{self.user_url(user)}/sessions", {"session_id": sid}, {201})
            client.send(
                "PUT",
                f"{self.session_url(user, sid)}/compaction-policy",
                {"token_threshold": COMPACTION_TOKENS},
                {200},
            )
            events = [
                self.text_event(rng, f"{self.prefix}-seed-{user}-{sid}-{n}")
                for n in range(SEED_EVENTS)
            ]
            self.append(client, (user, sid), events, "append_batch", -1)
        counter = iter(range(10**9))
        for _user in self.users:
            for _ in range(SEED_MEMORIES):
                self.op_memory_add(client, rng, -1, counter)
        client.close()
        with self.lock:
            failed = errors_by_kind(self.calls)
            self.calls.clear()
        if failed:
            raise RuntimeError(f"seeding {self.prefix} failed: {failed}")

    def drive(self, seconds: float, marks: list[tuple[float, Callable[[], None]]] = ()) -> float:
        """``CLIENTS`` client threads for ``seconds``; each ``(offset, action)`` of ``marks``
        runs at its offset in a thread of its own. The start time."""
        start = now()
        self.stop_at = start + seconds
        threads = [
            threading.Thread(target=self._client, args=(slot,), daemon=True)
            for slot in range(CLIENTS)
        ]
        for thread in threads:
            thread.start()
        actions = []
        for offset, action in marks:
            actions.append(threading.Thread(target=_at, args=(start + offset, action), daemon=True))
            actions[-1].start()
        for thread in threads + actions:
            thread.join()
        return start

    def _client(self, slot: int) -> None:
        client = Client(self.base_url, self.key)
        rng = random.Random(f"{self.prefix}-{slot}")  # noqa: S311
        counter = iter(range(10**9))
        names = [name for name, _w in self.mix]
        weights = [weight for _n, weight in self.mix]
        while now() < self.stop_at and self.take():
            name = rng.choices(names, weights)[0]
            if name == "append_batch":
                self.op_append(client, rng, slot, counter, batch=BATCH_EVENTS)
            else:
                getattr(self, f"op_{name}")(client, rng, slot, counter)
        client.close()


def _at(when: float, action: Callable[[], None]) -> None:
    delay = when - now()
    if delay > 0:
        time.sleep(delay)
    action()
