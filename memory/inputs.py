"""What a client sends to memory, parsed: the search request, the new entry's shape, the
erasure epoch, the memory policy, consent, a legal hold and a user erasure's confirmation;
and the limits and lists they are checked against, which the OpenAPI schemas
(``memory/api/schemas.py``) take from here.

Pure: no Django, no database, no app; a refusal is ``ctxadmin.errors.invalid``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ctxadmin.api.jsonsafe import JsonInputError, loads_strict
from ctxadmin.errors import invalid, strict_object
from ctxadmin.pruning import echoed, is_secret_key
from memory import facts
from memory import filters as memory_filters
from memory.extractors import NO_EXTRACTOR, ExtractorSpec, SpecError, parse_extractor

REDACTED = "[redacted]"
ADD_KEYS = frozenset(
    {
        "content",
        "metadata",
        "provenance",
        "idempotency_key",
        "embed",
        "erasure_epoch",
        "ttl_seconds",
        "replace",
        "key",
        "valid_from",
    }
)
PROVENANCE_KEYS = frozenset({"session_id", "event_id", "author", "timestamp"})
# How a new entry is embedded: ``sync`` before the answer, ``async`` by the embedding task,
# ``auto`` sync with an embedder in this process, else async.
EMBED_MODES = ("auto", "sync", "async")
# An idempotency key (and a metadata key): 1-256 characters, starting with a letter or digit.
KEY_PATTERN = "[A-Za-z0-9][A-Za-z0-9._:@/-]{0,255}"
MAX_KEY_LENGTH = 256
KEY = re.compile(rf"^{KEY_PATTERN}\Z")
# A provenance identifier (session, event, author).
ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}\Z")
UUID = re.compile(r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\Z")
SEARCH_KEYS = frozenset(
    {"query", "mode", "filter", "limit", "min_score", "weights", "as_of", "known_at"}
)
MODES = ("lexical", "vector", "hybrid")
MAX_SEARCH_LIMIT = 100
MAX_QUERY_BYTES = 4096
# A hybrid search's ``weights``: each from 0 to this.
MAX_WEIGHT = 100
# What a hit's score is: BM25 (lexical), cosine similarity (vector), or a hybrid fusion's.
SCORE_TYPES = ("bm25", "cosine", "rrf", "weighted")
# ``min_score`` is compared with each hit's score, on its mode's scale: BM25 (0 and up),
# cosine similarity (-1 to 1), a hybrid fusion's score (0 and up: RRF's sum of
# ``weight / (60 + rank)``, or the weighted sum of min-max normalised scores). Given, it
# replaces the default relevance floor (``memory/search.py``).
MAX_BM25_MIN_SCORE = 1_000_000.0
MIN_SCORE_RANGES = {
    "lexical": (0.0, MAX_BM25_MIN_SCORE),
    "vector": (-1.0, 1.0),
    "hybrid": (0.0, 2.0 * MAX_WEIGHT),
}
MAX_EPOCH = 2**63 - 1
# The session events one synchronous ingestion call takes (``memory/ingest.py``).
MAX_INGEST_EVENTS = 500


@dataclass(frozen=True)
class NewMemory:
    content: str
    metadata: dict
    idempotency_key: str | None
    session_id: str
    event_id: str
    author: str
    source_timestamp: Any
    embed: str  # sync | async | auto
    # The scope's erasure epoch the write was prepared at (None: not checked).
    erasure_epoch: int | None = None
    # The entry's own time to live (None: the app policy's ``default_ttl_seconds``).
    ttl_seconds: int | None = None
    # With an idempotency key: an entry holding the key is replaced by this one, in place.
    replace: bool = False
    # The fact this is a version of (``memory/facts.py``): it supersedes the key's version
    # it falls inside in valid time.
    key: str | None = None
    # When it became true (None: the provenance timestamp, else the add time).
    valid_from: Any = None


def redact_metadata(value: Any) -> Any:
    """Values under secret-named keys become a marker, at any depth."""
    if isinstance(value, dict):
        return {
            key: REDACTED if is_secret_key(key) else redact_metadata(child)
            for key, child in value.items()
        }
    if isinstance(value, list):
        return [redact_metadata(child) for child in value]
    return value


def parse_epoch(value: Any, path: str = "erasure_epoch") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EPOCH:
        raise invalid(path, "must be a non-negative integer (an erasure epoch)")
    return value


@dataclass(frozen=True)
class SearchRequest:
    query: str
    mode: str
    filter_sql: str
    filter_params: list
    limit: int
    min_score: float | None
    weights: dict[str, float] | None


def parse_search(body: Any) -> SearchRequest:
    strict_object(body, SEARCH_KEYS)
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise invalid("query", "must be a non-empty string")
    if len(query.encode("utf-8")) > MAX_QUERY_BYTES or "\x00" in query:
        raise invalid("query", f"must be at most {MAX_QUERY_BYTES} bytes, without NUL")
    mode = body.get("mode", "hybrid")
    if mode not in MODES:
        raise invalid("mode", f"must be one of {list(MODES)}")
    limit = body.get("limit", 10)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise invalid("limit", f"must be an integer from 1 to {MAX_SEARCH_LIMIT}")
    min_score = body.get("min_score")
    if min_score is not None:
        low, high = MIN_SCORE_RANGES[mode]
        if (
            isinstance(min_score, bool)
            or not isinstance(min_score, int | float)
            or not math.isfinite(min_score)
            or not low <= min_score <= high
        ):
            raise invalid("min_score", f"must be a number from {low:g} to {high:g} in {mode} mode")
    weights = body.get("weights")
    if weights is not None:
        if not isinstance(weights, dict) or set(weights) - {"lexical", "vector"} or not weights:
            raise invalid("weights", "must be an object with lexical and/or vector weights")
        for name, value in weights.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 <= value <= MAX_WEIGHT
            ):
                raise invalid(f"weights.{name}", f"must be a number from 0 to {MAX_WEIGHT}")
        if mode != "hybrid":
            raise invalid("weights", "apply to hybrid search only")
        if not any(weights.values()):
            raise invalid("weights", "must not all be 0")
    try:
        sql, params = memory_filters.compile_filter(body.get("filter"))
    except memory_filters.FilterError as exc:
        raise invalid(exc.path, exc.message) from None
    sql, params = with_validity(sql, params, body.get("as_of"), body.get("known_at"))
    return SearchRequest(query, mode, sql, params, limit, min_score, weights)


def with_validity(sql: str, params: list, as_of: Any, known_at: Any) -> tuple[str, list]:
    """A compiled filter narrowed to the versions valid at ``as_of`` as known at
    ``known_at`` (``memory.facts.visible``; each absent: now)."""
    validity, validity_params = facts.validity_sql(
        facts.parse_instant(as_of, "as_of"), facts.parse_instant(known_at, "known_at")
    )
    if not sql or sql == "TRUE":
        return validity, validity_params
    return f"{validity} AND ({sql})", [*validity_params, *params]


# The filter language nests three levels at most ({key: {"$in": [...]}}).
MAX_LIST_FILTER_DEPTH = 8


def parse_list_filter(
    raw: str | None, as_of: str | None = None, known_at: str | None = None
) -> tuple[str, list]:
    """``?filter=`` of the memory list (the search's filter object, as JSON text) and its
    ``?as_of=`` and ``?known_at=``, as one condition."""
    value = None
    if raw is not None:
        try:
            value = loads_strict(raw.encode("utf-8"), MAX_LIST_FILTER_DEPTH, name="filter")
        except JsonInputError as error:
            raise invalid(
                "filter", f"must be a JSON object (URL-encoded); {error.message}"
            ) from None
    try:
        sql, params = memory_filters.compile_filter(value)
    except memory_filters.FilterError as exc:
        raise invalid(exc.path, exc.message) from None
    return with_validity(sql, params, as_of, known_at)


# ----------------------------------------------------------------------------- governance

POLICY_KEYS = (
    "consent_required",
    "default_ttl_seconds",
    "retention_days",
    "legal_hold",
    "ingestion",
    "extractor",
)
INGESTION_MODES = ("off", "on_success")
CONSENT_KEYS = frozenset({"granted"})
MAX_TTL_SECONDS = 10 * 365 * 86400  # ten years
MAX_RETENTION_DAYS = 100 * 365
# A touch (``POST .../memories/touch``) refreshes at most this many entries.
MAX_TOUCH_IDS = 200
#: Adds in one batch (``POST .../memories/batch``).
MAX_BATCH_MEMORIES = 100
BATCH_KEYS = frozenset({"memories"})
TOUCH_KEYS = frozenset({"ids"})


@dataclass(frozen=True)
class Policy:
    consent_required: bool = False
    default_ttl_seconds: int | None = None
    retention_days: int | None = None
    legal_hold: bool = False
    # "on_success": an append that completes an invocation admits an outbox job.
    ingestion: str = "off"
    # What ingestion does with the turns (``memory.extractors``): none stores each as said.
    extractor: ExtractorSpec = NO_EXTRACTOR

    def as_dict(self) -> dict:
        values = {name: getattr(self, name) for name in POLICY_KEYS}
        values["extractor"] = self.extractor.as_dict()
        return values


DEFAULT_POLICY = Policy()


def parse_ttl_seconds(value: Any) -> int | None:
    """A new entry's own ``ttl_seconds``: null, or 1 to ``MAX_TTL_SECONDS``."""
    return _positive({"ttl_seconds": value}, "ttl_seconds", MAX_TTL_SECONDS)


def parse_touch(body: Any) -> list[str]:
    """``{"ids": [...]}``: 1 to ``MAX_TOUCH_IDS`` memory ids (UUIDs), each once."""
    strict_object(body, TOUCH_KEYS)
    ids = body.get("ids")
    if not isinstance(ids, list) or not 1 <= len(ids) <= MAX_TOUCH_IDS:
        raise invalid("ids", f"must be a list of 1 to {MAX_TOUCH_IDS} memory ids")
    for position, value in enumerate(ids):
        if not isinstance(value, str) or not UUID.match(value):
            raise invalid(f"ids.{position}", "must be a memory id (a UUID)")
    return sorted({value.lower() for value in ids})


def _positive(body: dict, name: str, maximum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise invalid(name, f"must be null or an integer from 1 to {maximum}")
    return value


def parse_extractor_field(
    value: Any, path: str = "extractor", connections: frozenset[str] | None = None
) -> ExtractorSpec:
    """An ``extractor`` field (``memory.extractors``), refused in the one error envelope."""
    try:
        return parse_extractor(value, path, connections)
    except SpecError as exc:
        raise invalid(exc.path, exc.message) from None


def parse_memory_policy(body: Any, connections: frozenset[str] | None = None) -> Policy:
    """A whole memory policy (PUT replaces it; a field left out takes its default).
    ``connections``: the provider connections configured, which an extractor must name."""
    strict_object(body, set(POLICY_KEYS))
    flags = {}
    for name in ("consent_required", "legal_hold"):
        value = body.get(name, False)
        if not isinstance(value, bool):
            raise invalid(name, "must be true or false")
        flags[name] = value
    ingestion = body.get("ingestion", "off")
    if ingestion not in INGESTION_MODES:
        raise invalid("ingestion", "must be off or on_success")
    ttl = _positive(body, "default_ttl_seconds", MAX_TTL_SECONDS)
    retention = _positive(body, "retention_days", MAX_RETENTION_DAYS)
    if ttl is not None and retention is not None and ttl < retention * 86400:
        raise invalid(
            "default_ttl_seconds",
            "must be at least retention_days (in seconds): an entry cannot expire before "
            "it may be erased",
        )
    return Policy(
        consent_required=flags["consent_required"],
        default_ttl_seconds=ttl,
        retention_days=retention,
        legal_hold=flags["legal_hold"],
        ingestion=ingestion,
        extractor=parse_extractor_field(body.get("extractor", {}), "extractor", connections),
    )


def parse_consent(body: Any) -> bool:
    """``{"granted": true | false}``: the consent to record."""
    strict_object(body, CONSENT_KEYS)
    granted = body.get("granted")
    if not isinstance(granted, bool):
        raise invalid("granted", "must be true or false")
    return granted


def parse_legal_hold(body: Any) -> None:
    """A legal hold takes no fields: no body, or an empty object."""
    if body is not None and not isinstance(body, dict):
        raise invalid("body", "must be empty or an empty JSON object")
    if body:
        raise invalid(echoed(sorted(body)[0]), "unknown field")


ERASE_USER_KEYS = frozenset({"confirm"})


def parse_user_confirmation(body: Any, user_id: str) -> None:
    """``{"confirm": "erase user <user_id>"}``, exactly."""
    strict_object(body, ERASE_USER_KEYS)
    expected = f"erase user {user_id}"
    if body.get("confirm") != expected:
        raise invalid("confirm", f"must be exactly {expected!r} to erase this user's memory")
