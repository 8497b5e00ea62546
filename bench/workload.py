"""The conversation both sides of the session benchmarks append (as ctxadmin JSON events).

The same shape as ``bench.adk_peer``'s ADK events: turns alternate ``user, call, response,
model`` and ``user, model`` (four text events per tool unit), text of 200-600 bytes, and a
small state delta with session and ``user:`` keys on every tenth event.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

from bench.adk_peer import _WORDS, AGENT, TOOLS, _text


def conversation(rng: random.Random, count: int, tag: str) -> Iterator[dict]:
    pattern = ("user", "call", "response", "model", "user", "model")
    invocation = ""
    call: dict | None = None
    for index in range(count):
        kind = pattern[index % len(pattern)]
        if kind == "call" and index == count - 1:
            kind = "model"
        if kind == "user":
            invocation = f"e-{uuid.uuid4()}"
            author, role, part = "user", "user", {"text": _text(rng)}
        elif kind == "model":
            author, role, part = AGENT, "model", {"text": _text(rng)}
        elif kind == "call":
            call = {
                "id": f"call-{uuid.uuid4().hex[:16]}",
                "name": rng.choice(TOOLS),
                "args": {"query": _text(rng, 30, 80), "limit": rng.randint(3, 10)},
            }
            author, role, part = AGENT, "model", {"function_call": call}
        else:
            assert call is not None
            author, role = AGENT, "user"
            part = {
                "function_response": {
                    "id": call["id"],
                    "name": call["name"],
                    "response": {"result": _text(rng)},
                }
            }
        event = {
            "invocation_id": invocation,
            "author": author,
            "content": {"role": role, "parts": [part]},
        }
        if index % 10 == 9:
            event["actions"] = {
                "state_delta": {
                    "turn": index,
                    "last_author": author,
                    "topic": f"{tag}-{rng.choice(_WORDS)}",
                    "user:events_seen": index + 1,
                }
            }
        yield event
