"""The runner's requests, validated whole before anything is read or written: a context
request (the current input, instructions, tools, the context policy, memory retrieval) and
an invocation request (the agent, its context, cache and ingestion modes, its deadline).
Every limit of these requests is named here; the API schemas import them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings

from ctxadmin.api.paths import path_segment_error
from ctxadmin.canonical import canonical_size, fingerprint
from ctxadmin.errors import ServiceError, invalid, strict_object
from ctxadmin.providers.base import UnknownConnection, get_connection
from ctxadmin.pruning import echoed
from memory import inputs as memory_inputs
from memory import profile as memory_profile
from memory import render
from sessions_app.context.policy import ContextPolicy, PolicyError, parse_context_policy
from sessions_app.events import EventError, validate_content
from sessions_app.services import event_limits

CONTEXT_REQUEST_KEYS = frozenset(
    {"current_input", "instructions", "generation_config", "tools", "policy", "memory", "profile"}
)


MEMORY_KEYS = frozenset(
    {
        "query",
        "mode",
        "limit",
        "filter",
        "as_of",
        "known_at",
        "max_hit_bytes",
        "max_total_bytes",
        "on_error",
    }
)
# What of a memory retrieval is its search's (the rest shapes the slot).
_SEARCH_KEYS = frozenset({"query", "mode", "limit", "filter", "as_of", "known_at"})


MAX_MEMORY_HIT_BYTES = 64 * 1024
#: What a failed memory search does to the build: fail it, or build without memory.
MEMORY_ON_ERROR = ("error", "omit")
MAX_MEMORY_TOTAL_BYTES = 1024 * 1024
MAX_INSTRUCTIONS_BYTES = 1024 * 1024
MAX_GENERATION_CONFIG_BYTES = 64 * 1024
MAX_TOOLS = 512
MAX_TOOLS_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ContextRequest:
    current_input: dict
    instructions: str | None
    generation_config: dict | None
    tools: list | None
    policy: ContextPolicy
    memory: MemoryRetrieval | None = None
    profile: Any = None  # memory.profile.ProfileRequest: the profile slot, placed first


@dataclass(frozen=True)
class MemoryRetrieval:
    """Memory hits for the envelope's memory slot, rendered as untrusted reference data."""

    search: Any  # memory.inputs.SearchRequest
    max_hit_bytes: int
    max_total_bytes: int | None  # None: packed into what the request budget leaves
    on_error: str  # error | omit
    # No ``limit`` given: the search's limit is at most what the slot could hold.
    limit_follows_budget: bool = False

    def search_in(self, slot_bytes: int):
        """The search for a slot of at most ``slot_bytes`` (``max_total_bytes``, or what the
        request budget leaves): the caller's ``limit``, else ``default_limit``."""
        if not self.limit_follows_budget:
            return self.search
        return replace(self.search, limit=min(self.search.limit, default_limit(slot_bytes)))


def default_limit(slot_bytes: int) -> int:
    """A context request's default memory ``limit``: as many hits as ``slot_bytes`` could
    hold, each at its smallest (``render.MIN_PACKED_HIT_BYTES``), up to the search's
    maximum: a search ranks no more hits than the slot can take, and from a slot of 7,100
    bytes on (some 1,850 tokens of budget) it asks for the most, as the best configuration
    measured does (bench/BENCHMARKS.md, "Evidence in context")."""
    return max(1, min(memory_inputs.MAX_SEARCH_LIMIT, slot_bytes // render.MIN_PACKED_HIT_BYTES))


def memory_retrieval(value: Any) -> MemoryRetrieval:
    if not isinstance(value, dict):
        raise invalid("memory", "must be an object")
    unknown = sorted(set(value) - MEMORY_KEYS)
    if unknown:
        raise invalid(f"memory.{echoed(unknown[0])}", "unknown field")
    budgets = {}
    for name, default, limit in (
        ("max_hit_bytes", 2048, MAX_MEMORY_HIT_BYTES),
        # None: the slot is packed into what the request budget leaves.
        ("max_total_bytes", None, MAX_MEMORY_TOTAL_BYTES),
    ):
        number = value.get(name, default)
        if number is None and default is None:
            budgets[name] = None
            continue
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= limit:
            raise invalid(f"memory.{name}", f"must be an integer from 1 to {limit}")
        budgets[name] = number
    on_error = value.get("on_error", "error")
    if on_error not in MEMORY_ON_ERROR:
        raise invalid("memory.on_error", "must be error or omit")
    search_body = {k: v for k, v in value.items() if k in _SEARCH_KEYS}
    follows = "limit" not in search_body
    search_body.setdefault("limit", memory_inputs.MAX_SEARCH_LIMIT)
    try:
        search = memory_inputs.parse_search(search_body)
    except ServiceError as exc:
        field = exc.details.get("field", "")
        raise invalid(f"memory.{field}", exc.message.split(": ", 1)[-1]) from None
    return MemoryRetrieval(
        search, budgets["max_hit_bytes"], budgets["max_total_bytes"], on_error, follows
    )


def parse_context_request(body: Any) -> ContextRequest:
    """Everything is validated before any event is read."""
    strict_object(body, CONTEXT_REQUEST_KEYS)
    if "current_input" not in body:
        raise invalid("current_input", "is required")
    try:
        current_input = validate_content(body["current_input"], "current_input", event_limits())
    except EventError as exc:
        raise invalid(exc.path, exc.message) from None
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise invalid("instructions", "must be a string")
        if len(instructions.encode()) > MAX_INSTRUCTIONS_BYTES:
            raise invalid("instructions", f"must be at most {MAX_INSTRUCTIONS_BYTES} bytes")
    config = body.get("generation_config")
    if config is not None:
        if not isinstance(config, dict):
            raise invalid("generation_config", "must be an object")
        if canonical_size(config) > MAX_GENERATION_CONFIG_BYTES:
            raise invalid(
                "generation_config", f"must be at most {MAX_GENERATION_CONFIG_BYTES} bytes"
            )
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
            raise invalid("tools", "must be a list of objects (tool declarations)")
        if len(tools) > MAX_TOOLS or canonical_size(tools) > MAX_TOOLS_BYTES:
            raise invalid(
                "tools", f"must be at most {MAX_TOOLS} declarations and {MAX_TOOLS_BYTES} bytes"
            )
    try:
        policy = parse_context_policy(body.get("policy"))
    except PolicyError as exc:
        raise invalid(exc.path, exc.message) from None
    memory = memory_retrieval(body["memory"]) if body.get("memory") is not None else None
    profile = None
    if body.get("profile") is not None:
        profile = memory_profile.parse_profile_body(body["profile"], "profile")
    return ContextRequest(current_input, instructions, config, tools, policy, memory, profile)


INVOCATION_REQUEST_KEYS = frozenset(
    {
        "invocation_id",
        "input",
        "agent",
        "context_policy",
        "memory_retrieval",
        "profile",
        "cache",
        "ingestion",
        "deadline_ms",
    }
)


AGENT_KEYS = frozenset(
    {"provider", "model", "instructions", "declarations", "generation_config", "name"}
)


CACHE_KEYS = frozenset({"ttl_ms", "min_prefix_tokens"})
INGESTION_MODES = ("off", "on_success", "durable")
DEFAULT_DEADLINE_MS = 60_000
MAX_DEADLINE_MS = 600_000
DEFAULT_CACHE_TTL_MS = 3_600_000
MIN_CACHE_TTL_MS = 1000


@dataclass(frozen=True)
class Agent:
    provider: str
    model: str
    name: str
    instructions: str | None
    declarations: list[dict]
    generation_config: dict | None


@dataclass(frozen=True)
class InvocationRequest:
    invocation_id: str
    input: dict
    agent: Agent
    context: ContextRequest
    cache_ttl_ms: int | None  # None: off
    cache_min_tokens: int
    ingestion: str
    deadline_ms: int
    fingerprint: str


def parse_agent(value: Any) -> Agent:
    value = strict_object(value, AGENT_KEYS) if value is not None else {}
    provider = value.get("provider")
    if not isinstance(provider, str) or not provider:
        raise invalid("agent.provider", "is required: a connection name or fake")
    if provider != "fake":
        try:
            get_connection(provider)
        except UnknownConnection:
            raise invalid(
                "agent.provider", "names no connection in CTXADMIN_PROVIDERS (or use fake)"
            ) from None
    model = value.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 128:
        raise invalid("agent.model", "must be a model name of at most 128 characters")
    name = value.get("name", "model")
    if not isinstance(name, str) or not 1 <= len(name) <= 128 or name == "user":
        raise invalid("agent.name", "must be an author name (1-128 characters, not user)")
    declarations = value.get("declarations", [])
    if not isinstance(declarations, list) or not all(
        isinstance(d, dict) and isinstance(d.get("name"), str) for d in declarations
    ):
        raise invalid("agent.declarations", "must be a list of {name, description?, parameters?}")
    return Agent(
        provider=provider,
        model=model,
        name=name,
        instructions=value.get("instructions"),
        declarations=declarations,
        generation_config=value.get("generation_config"),
    )


def parse_invocation_request(body: Any) -> InvocationRequest:
    """Everything is validated before anything is written."""
    strict_object(body, INVOCATION_REQUEST_KEYS)
    invocation_id = body.get("invocation_id")
    if not isinstance(invocation_id, str) or path_segment_error("sid", invocation_id):
        raise invalid("invocation_id", "is required: 1-128 characters from A-Z a-z 0-9 . _ : @ -")
    if "input" not in body:
        raise invalid("input", "is required")
    try:
        content = validate_content(body["input"], "input", event_limits())
    except EventError as exc:
        raise invalid(exc.path, exc.message) from None
    if content.get("role", "user") != "user":
        raise invalid("input.role", "must be user")
    agent = parse_agent(body.get("agent"))
    memory = body.get("memory_retrieval")
    if memory is not None:
        memory = dict(strict_object(memory, MEMORY_KEYS - {"query"}))
        memory.setdefault("query", text_of(content) or " ")
    context = parse_context_request(
        {
            "current_input": body["input"],
            "instructions": agent.instructions,
            "generation_config": agent.generation_config,
            "tools": agent.declarations or None,
            "policy": body.get("context_policy"),
            **({"memory": memory} if memory is not None else {}),
            "profile": body.get("profile"),
        }
    )
    cache = body.get("cache", {})
    ttl_ms: int | None = None
    min_tokens = 0
    if cache not in (None, "off", False):
        cache = strict_object(cache, CACHE_KEYS)
        ttl_ms = cache.get("ttl_ms", DEFAULT_CACHE_TTL_MS)
        if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < MIN_CACHE_TTL_MS:
            raise invalid("cache.ttl_ms", f"must be an integer >= {MIN_CACHE_TTL_MS}")
        if ttl_ms > settings.CTXADMIN_CACHE_MAX_TTL_MS:
            raise invalid("cache.ttl_ms", f"must be at most {settings.CTXADMIN_CACHE_MAX_TTL_MS}")
        min_tokens = cache.get("min_prefix_tokens", 1024)
        if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0:
            raise invalid("cache.min_prefix_tokens", "must be an integer >= 0")
    ingestion = body.get("ingestion", "off")
    if ingestion not in INGESTION_MODES:
        raise invalid("ingestion", f"must be one of {list(INGESTION_MODES)}")
    deadline_ms = body.get("deadline_ms", DEFAULT_DEADLINE_MS)
    if (
        isinstance(deadline_ms, bool)
        or not isinstance(deadline_ms, int)
        or not (1 <= deadline_ms <= MAX_DEADLINE_MS)
    ):
        raise invalid("deadline_ms", f"must be an integer from 1 to {MAX_DEADLINE_MS}")
    return InvocationRequest(
        invocation_id=invocation_id,
        input=content,
        agent=agent,
        context=context,
        cache_ttl_ms=ttl_ms,
        cache_min_tokens=min_tokens,
        ingestion=ingestion,
        deadline_ms=deadline_ms,
        fingerprint=fingerprint({k: v for k, v in body.items() if k != "deadline_ms"}),
    )


def text_of(content: dict) -> str:
    return " ".join(p["text"] for p in content.get("parts", []) if isinstance(p.get("text"), str))
