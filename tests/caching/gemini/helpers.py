"""What the Gemini explicit-caching tests share: a prefix holding a marker that must never leak,
the key, and one create against the adapter."""

from __future__ import annotations

from caching.adapters import CachePrefix, CreatedResource, GeminiCacheAdapter
from ctxadmin.testing.fake_gemini_cache import (
    FakeGeminiCache,
)

MODEL = "gemini-2.5-flash"
KEY = "AIza-KEY-3c9f-do-not-log"
MARKER = "zebra-quartz-marker"
SYSTEM = f"{MARKER} system: you answer questions about the launch plan"
TAG = "0b7e5d1c2a4f4e6b8d9c0a1b2c3d4e5f"
TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ]
    }
]
TOOL_CONFIG = {"functionCallingConfig": {"mode": "AUTO"}}
CONTENTS = [
    {"role": "user", "parts": [{"text": f"{MARKER} the launch moved to May"}]},
    {"role": "model", "parts": [{"text": "Noted: May."}]},
]
PREFIX = CachePrefix(
    system_instruction=SYSTEM, tools=TOOLS, tool_config=TOOL_CONFIG, contents=CONTENTS
)
QUESTION = [{"role": "user", "parts": [{"text": "When is the launch?"}]}]


def create(adapter: GeminiCacheAdapter, **overrides: object) -> CreatedResource:
    arguments = {
        "model": MODEL,
        "prefix": PREFIX,
        "ttl_ms": 300_000,
        "tag": TAG,
        "timeout_s": 5.0,
        **overrides,
    }
    return adapter.create(**arguments)


def last(fake: FakeGeminiCache, method: str):
    return [r for r in fake.requests if r.method == method][-1]
