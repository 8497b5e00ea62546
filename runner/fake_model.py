"""The ``fake`` model provider of invocations: deterministic, in-process, for demos, tests and
benchmarks (its delay is ``CTXADMIN_FAKE_MODEL_DELAY_MS``).

It answers the newest content: a function response gets a short confirmation; user text
``call:<name> <json args>`` naming a declared tool gets a function call of that tool; any
other user text is acknowledged with its length and the number of contents it was sent.
"""

from __future__ import annotations

import json
import time
import uuid

from django.conf import settings

from ctxadmin.canonical import canonical_size
from ctxadmin.providers.base import Generation, ProviderError


def generate(
    *,
    model: str,
    instructions: str | None,
    tools: list[dict],
    contents: list[dict],
    deadline: float,
    generation_config: dict | None = None,
    cached_content: str | None = None,
    cached_tokens: int | None = None,
) -> Generation:
    delay = settings.CTXADMIN_FAKE_MODEL_DELAY_MS / 1000
    if delay:
        if time.monotonic() + delay > deadline:
            time.sleep(max(deadline - time.monotonic(), 0))
            raise ProviderError("provider_timeout")
        time.sleep(delay)
    last = contents[-1] if contents else {"parts": []}
    declared = {tool.get("name") for tool in tools}
    parts: list[dict]
    responses = [p["function_response"] for p in last["parts"] if "function_response" in p]
    text = "".join(p.get("text", "") for p in last["parts"] if isinstance(p.get("text"), str))
    if responses:
        names = ", ".join(sorted({r["name"] for r in responses}))
        parts = [{"text": f"Done: {names} answered."}]
    elif text.startswith("call:") and text[5:].split(" ", 1)[0] in declared:
        name, _, raw_args = text[5:].partition(" ")
        try:
            args = json.loads(raw_args) if raw_args.strip() else {}
        except ValueError:
            args = {}
        if not isinstance(args, dict):
            args = {}
        parts = [
            {"function_call": {"id": f"call-{uuid.uuid4().hex[:12]}", "name": name, "args": args}}
        ]
    else:
        parts = [{"text": f"Noted ({len(text)} characters, {len(contents)} contents)."}]
    prompt_bytes = (
        canonical_size(contents) + len((instructions or "").encode()) + canonical_size(tools)
    )
    return Generation(
        parts=parts,
        input_tokens=-(-prompt_bytes // 4),
        output_tokens=-(-canonical_size(parts) // 4),
        cached_tokens=cached_tokens if cached_content else None,
        finish_reason="STOP",
        model=model,
    )
