"""One extraction step: the candidates a batch of turns is shown, and the extractor's answer.

- **Candidates** (``candidates_for``): the scope's live memories, numbered 1..N by the
  server: the current version of each key (the most recently valid first, at most
  ``MAX_KEYED_CANDIDATES``), then the unkeyed memories the batch's user turns match best
  (lexical search, at most ``MAX_RELATED_CANDIDATES``). Never another scope's: the search and
  the read are the scope's own.
- **The answer** (``extract``): the rule-based extractor's, or a model's through the provider
  connection the spec names (``ctxadmin.providers.complete_json``, structured output held to
  ``memory.extractors.answer_schema``, temperature 0). A reply that is not JSON stays text, so
  the check refuses it (``answer_invalid``) and the run records that. A provider failure is
  ``ExtractionFailed`` with the provider's code, never a word of the prompt or the reply.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from ctxadmin import providers
from ctxadmin.models import App
from ctxadmin.providers import ProviderError, UnknownConnection
from ctxadmin.providers.clients import parse_json_reply
from memory import rule_extractor
from memory import search as memory_search
from memory.extractors import (
    DEFAULT_OUTPUT_TOKENS,
    MAX_RAW_ANSWER_CHARS,
    PROMPT_VERSION,
    SYSTEM,
    ExtractorSpec,
    answer_schema,
    build_prompt,
)
from memory.facts import LIVE
from memory.inputs import MAX_QUERY_BYTES, parse_search
from memory.proposals import Candidate

MAX_KEYED_CANDIDATES = 30
MAX_RELATED_CANDIDATES = 20
# How long a model may take to answer one batch.
MODEL_DEADLINE_SECONDS = 60.0


class ExtractionFailed(Exception):
    """The extractor gave no answer: ``code`` is content-free (a provider's error code)."""

    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Answer:
    value: Any  # the parsed JSON, or the reply's text when it is not JSON
    raw: str  # what the extractor said, cut to MAX_RAW_ANSWER_CHARS
    model: str  # the model's name as the provider reported it ("rules" for the rules)
    prompt_version: str
    input_tokens: int | None = None
    output_tokens: int | None = None


def _query(turns: list[dict]) -> str | None:
    text = " ".join(turn["text"] for turn in turns if turn.get("role") == "user").strip()
    if not text:
        return None
    encoded = text.encode("utf-8")[:MAX_QUERY_BYTES]
    return encoded.decode("utf-8", errors="ignore").replace("\x00", " ")


def candidates_for(app: App, user_id: str, turns: list[dict]) -> list[Candidate]:
    """The numbered candidates for ``turns`` (see the module)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id::text, content, key FROM memory_memoryentry "  # noqa: S608
            f"WHERE app_id = %s AND user_id = %s AND key IS NOT NULL AND valid_to IS NULL "
            f"AND {LIVE} "
            f"ORDER BY valid_from DESC, id LIMIT %s",
            [app.pk, user_id, MAX_KEYED_CANDIDATES],
        )
        rows = cursor.fetchall()
    query = _query(turns)
    if query is not None:
        hits = memory_search.search(
            app,
            user_id,
            parse_search({"query": query, "mode": "lexical", "limit": MAX_RELATED_CANDIDATES * 2}),
        )
        shown = {row[0] for row in rows}
        related = [hit["id"] for hit in hits if hit["id"] not in shown]
        if related:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT id::text, content, key FROM memory_memoryentry "  # noqa: S608
                    f"WHERE app_id = %s AND user_id = %s AND id = ANY(%s::uuid[]) "
                    f"AND key IS NULL AND valid_to IS NULL AND {LIVE}",
                    [app.pk, user_id, related],
                )
                found = {row[0]: row for row in cursor.fetchall()}
            rows += [found[i] for i in related if i in found][:MAX_RELATED_CANDIDATES]
    return [
        Candidate(number, memory_id, content, key)
        for number, (memory_id, content, key) in enumerate(rows, start=1)
    ]


def prompt_for(spec: ExtractorSpec, turns: list[dict], candidates: list[Candidate]) -> str:
    """What ``spec``'s model is asked about this batch (``memory.extractors.build_prompt``);
    '' for the rules, which need none."""
    return "" if spec.kind == "rules" else build_prompt(turns, candidates)


def estimated_tokens(spec: ExtractorSpec, prompt: str) -> int:
    """What asking ``spec``'s model with ``prompt`` may cost at most, in tokens: the system
    prompt's and the prompt's characters over four (what a tokenizer gives for English
    text, about) and the answer's limit; 0 for the rules."""
    if spec.kind == "rules":
        return 0
    return (len(SYSTEM) + len(prompt)) // 4 + (spec.max_output_tokens or DEFAULT_OUTPUT_TOKENS)


def extract(
    spec: ExtractorSpec, turns: list[dict], candidates: list[Candidate], prompt: str | None = None
) -> Answer:
    """The extractor's answer for ``turns`` over ``candidates`` (``prompt``: ``prompt_for``'s,
    when the caller built it already)."""
    if spec.kind == "rules":
        value = rule_extractor.propose(turns, candidates)
        raw = json.dumps(value, ensure_ascii=False, sort_keys=True)
        return Answer(value, raw[:MAX_RAW_ANSWER_CHARS], "rules", rule_extractor.VERSION)
    try:
        provider = providers.get_connection(spec.connection or "")
    except (UnknownConnection, ImproperlyConfigured):
        raise ExtractionFailed("extractor_unavailable") from None
    if provider.kind != spec.kind:
        raise ExtractionFailed("extractor_unavailable")
    try:
        completion = providers.complete_json(
            provider,
            model=spec.model or "",
            system=SYSTEM,
            prompt=build_prompt(turns, candidates) if prompt is None else prompt,
            schema=answer_schema(),
            deadline=time.monotonic() + MODEL_DEADLINE_SECONDS,
            max_output_tokens=spec.max_output_tokens or DEFAULT_OUTPUT_TOKENS,
            temperature=0.0,
        )
    except ProviderError as exc:
        raise ExtractionFailed(exc.code) from None
    except ValueError:
        raise ExtractionFailed("extractor_unavailable") from None
    return Answer(
        parse_json_reply(completion.text),
        completion.text[:MAX_RAW_ANSWER_CHARS],
        completion.model or spec.model or "",
        PROMPT_VERSION,
        completion.input_tokens,
        completion.output_tokens,
    )
