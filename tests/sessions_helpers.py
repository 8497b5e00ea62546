"""Builders for events and contents used across the session tests."""

from __future__ import annotations

import itertools

_ids = itertools.count(1)


def text(author: str, words: str, role: str | None = None, **extra) -> dict:
    return {
        "author": author,
        "content": {
            "role": role or ("user" if author == "user" else "model"),
            "parts": [{"text": words}],
        },
        **extra,
    }


def call(call_id: str, name: str = "lookup", args: dict | None = None, **extra) -> dict:
    return {
        "author": "agent",
        "content": {
            "role": "model",
            "parts": [{"function_call": {"id": call_id, "name": name, "args": args or {}}}],
        },
        **extra,
    }


def response(call_id: str, result: dict | None = None, name: str = "lookup", **extra) -> dict:
    return {
        "author": "tool",
        "content": {
            "role": "user",
            "parts": [
                {
                    "function_response": {
                        "id": call_id,
                        "name": name,
                        "response": result or {"ok": True},
                    }
                }
            ],
        },
        **extra,
    }


def user_input(words: str = "what next?") -> dict:
    return {"role": "user", "parts": [{"text": words}]}


def sessions_url(app: str, user: str = "alice") -> str:
    return f"/api/v1/apps/{app}/users/{user}/sessions"
