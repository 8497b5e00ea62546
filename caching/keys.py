"""Cache scopes, policies, prefixes and the registry key (pure; no Django import).

A *scope* is (provider, app, user, model, policy fingerprint): what ``invalidate`` names and
what a lease's generation belongs to. An *entry key* adds the secret-pruned prefix
fingerprint and the TTL. Everything here validates strictly: unknown keys are refused, and a
policy that carries a secret-named key anywhere is refused as ``sensitive_cache_scope``
before anything else is looked at, so a credential never becomes part of a fingerprint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ctxadmin.canonical import canonical_size, fingerprint
from ctxadmin.pruning import echoed, is_secret_key, prune_secrets

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}")
_LABEL_KEY = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
FAILURE_MODES = ("bypass", "error")
MIN_TTL_MS = 1000
MAX_LABELS = 16
MAX_LABEL_VALUE = 128
MAX_CONTENTS = 10_000
MAX_TOOLS = 512
_PART_KEYS = frozenset(
    {
        "text",
        "inlineData",
        "fileData",
        "functionCall",
        "functionResponse",
        "executableCode",
        "codeExecutionResult",
        "thought",
        "thoughtSignature",
    }
)
POLICY_KEYS = frozenset(
    {
        "min_prefix_tokens",
        "default_ttl_ms",
        "max_ttl_ms",
        "max_entries",
        "max_waiters",
        "failure_mode",
        "bytes_per_token",
        "labels",
    }
)
SCOPE_KEYS = frozenset({"provider", "user_id", "model", "policy"})
PREFIX_KEYS = frozenset({"system_instruction", "tools", "tool_config", "contents"})


class CacheInputError(ValueError):
    """Input no registry could accept: ``code`` is the API error code, ``path`` the field."""

    def __init__(self, path: str, message: str, code: str = "validation_error"):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
        self.code = code


@dataclass(frozen=True)
class Limits:
    """The deployment's ceilings (from settings) that a policy may lower but not raise."""

    max_ttl_ms: int
    max_entries: int
    max_waiters: int
    providers: tuple[str, ...]


@dataclass(frozen=True)
class CachePolicy:
    min_prefix_tokens: int
    default_ttl_ms: int
    max_ttl_ms: int
    max_entries: int
    max_waiters: int
    failure_mode: str
    bytes_per_token: int
    labels: dict[str, str]

    def as_json(self) -> dict[str, Any]:
        return {
            "min_prefix_tokens": self.min_prefix_tokens,
            "default_ttl_ms": self.default_ttl_ms,
            "max_ttl_ms": self.max_ttl_ms,
            "max_entries": self.max_entries,
            "max_waiters": self.max_waiters,
            "failure_mode": self.failure_mode,
            "bytes_per_token": self.bytes_per_token,
            "labels": dict(self.labels),
        }

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.as_json())


@dataclass(frozen=True)
class CacheScope:
    provider: str
    app: str
    user_id: str
    model: str
    policy: CachePolicy

    @property
    def fingerprint(self) -> str:
        return fingerprint(
            {
                "v": 1,
                "provider": self.provider,
                "app": self.app,
                "user_id": self.user_id,
                "model": self.model,
                "policy": self.policy.fingerprint,
            }
        )


@dataclass(frozen=True)
class Prefix:
    """A secret-pruned prefix (the shape ``caching.adapters.CachePrefix`` takes)."""

    system_instruction: str | None
    tools: list
    tool_config: dict | None
    contents: list

    def as_json(self) -> dict[str, Any]:
        return {
            "system_instruction": self.system_instruction,
            "tools": self.tools,
            "tool_config": self.tool_config,
            "contents": self.contents,
        }

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.as_json())

    def estimated_tokens(self, bytes_per_token: int) -> int:
        return -(-canonical_size(self.as_json()) // bytes_per_token)


def entry_key(scope_fingerprint: str, prefix_fingerprint: str, ttl_ms: int) -> str:
    return fingerprint({"scope": scope_fingerprint, "prefix": prefix_fingerprint, "ttl_ms": ttl_ms})


# --------------------------------------------------------------------------- parsing


def _object(value: Any, path: str, allowed: frozenset[str]) -> dict:
    if not isinstance(value, dict):
        raise CacheInputError(path, "must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise CacheInputError(
            f"{path}.{echoed(unknown[0])}", f"unknown key; allowed: {sorted(allowed)}"
        )
    return value


def _int(value: Any, path: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise CacheInputError(path, f"must be an integer from {low} to {high}")
    return value


def secret_key_path(value: Any, path: str) -> str | None:
    """The path of the first secret-named key anywhere in ``value`` (None: there is none)."""
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{echoed(key)}"
            if isinstance(key, str) and is_secret_key(key):
                return here
            found = secret_key_path(item, here)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = secret_key_path(item, f"{path}[{index}]")
            if found:
                return found
    return None


def check_sensitive(body: Any) -> None:
    """Refuse a request whose scope policy names a secret, before anything else is checked."""
    scope = body.get("scope") if isinstance(body, dict) else None
    if isinstance(scope, dict) and "policy" in scope:
        sensitive = secret_key_path(scope["policy"], "scope.policy")
        if sensitive:
            raise CacheInputError(
                sensitive,
                "a cache policy must not carry secret-named keys",
                code="sensitive_cache_scope",
            )


def parse_cache_policy(raw: Any, limits: Limits, path: str = "scope.policy") -> CachePolicy:
    raw = {} if raw is None else raw
    sensitive = secret_key_path(raw, path)
    if sensitive:
        raise CacheInputError(
            sensitive,
            "a cache policy must not carry secret-named keys",
            code="sensitive_cache_scope",
        )
    raw = _object(raw, path, POLICY_KEYS)
    max_ttl = _int(
        raw.get("max_ttl_ms", limits.max_ttl_ms),
        f"{path}.max_ttl_ms",
        MIN_TTL_MS,
        limits.max_ttl_ms,
    )
    default_ttl = _int(
        raw.get("default_ttl_ms", min(3_600_000, max_ttl)),
        f"{path}.default_ttl_ms",
        MIN_TTL_MS,
        limits.max_ttl_ms,
    )
    if default_ttl > max_ttl:
        raise CacheInputError(f"{path}.default_ttl_ms", "must not exceed max_ttl_ms")
    failure_mode = raw.get("failure_mode", "bypass")
    if failure_mode not in FAILURE_MODES:
        raise CacheInputError(f"{path}.failure_mode", f"must be one of {list(FAILURE_MODES)}")
    labels = raw.get("labels", {})
    if not isinstance(labels, dict) or len(labels) > MAX_LABELS:
        raise CacheInputError(f"{path}.labels", f"must be an object of at most {MAX_LABELS} labels")
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(key):
            raise CacheInputError(f"{path}.labels", "label names are [a-z0-9_.-], 1-63 characters")
        if not isinstance(value, str) or len(value) > MAX_LABEL_VALUE:
            raise CacheInputError(
                f"{path}.labels.{echoed(key)}",
                f"must be a string of at most {MAX_LABEL_VALUE} characters",
            )
    return CachePolicy(
        min_prefix_tokens=_int(
            raw.get("min_prefix_tokens", 1024), f"{path}.min_prefix_tokens", 0, 10_000_000
        ),
        default_ttl_ms=default_ttl,
        max_ttl_ms=max_ttl,
        max_entries=_int(
            raw.get("max_entries", limits.max_entries), f"{path}.max_entries", 1, limits.max_entries
        ),
        max_waiters=_int(
            raw.get("max_waiters", limits.max_waiters), f"{path}.max_waiters", 1, limits.max_waiters
        ),
        failure_mode=failure_mode,
        bytes_per_token=_int(raw.get("bytes_per_token", 4), f"{path}.bytes_per_token", 1, 16),
        labels={key: labels[key] for key in sorted(labels)},
    )


def parse_scope(raw: Any, app: str, limits: Limits, path: str = "scope") -> CacheScope:
    # The policy's secret check comes first, whatever else is wrong.
    if isinstance(raw, dict) and "policy" in raw:
        sensitive = secret_key_path(raw["policy"], f"{path}.policy")
        if sensitive:
            raise CacheInputError(
                sensitive,
                "a cache policy must not carry secret-named keys",
                code="sensitive_cache_scope",
            )
    raw = _object(raw, path, SCOPE_KEYS)
    for required in ("provider", "user_id", "model"):
        if required not in raw:
            raise CacheInputError(f"{path}.{required}", "is required")
    provider = raw["provider"]
    if provider not in limits.providers:
        raise CacheInputError(f"{path}.provider", f"must be one of {list(limits.providers)}")
    user_id = raw["user_id"]
    if not isinstance(user_id, str) or not _ID.fullmatch(user_id):
        raise CacheInputError(
            f"{path}.user_id",
            "1-128 characters from A-Z a-z 0-9 . _ : @ -, starting with a letter or digit",
        )
    model = raw["model"]
    if not isinstance(model, str) or not _MODEL.fullmatch(model):
        raise CacheInputError(f"{path}.model", "1-128 characters from A-Z a-z 0-9 . _ / : -")
    return CacheScope(
        provider=provider,
        app=app,
        user_id=user_id,
        model=model.removeprefix("models/"),
        policy=parse_cache_policy(raw.get("policy"), limits, f"{path}.policy"),
    )


def _content(value: Any, path: str) -> dict:
    value = _object(value, path, frozenset({"role", "parts"}))
    if value.get("role") not in ("user", "model"):
        raise CacheInputError(f"{path}.role", 'must be "user" or "model"')
    parts = value.get("parts")
    if not isinstance(parts, list) or not parts:
        raise CacheInputError(f"{path}.parts", "must be a non-empty array")
    for index, part in enumerate(parts):
        where = f"{path}.parts[{index}]"
        part = _object(part, where, _PART_KEYS)
        if not part:
            raise CacheInputError(where, "must not be empty")
        if "text" in part and not isinstance(part["text"], str):
            raise CacheInputError(f"{where}.text", "must be a string")
    return value


def parse_prefix(raw: Any, path: str = "prefix") -> Prefix:
    """The prefix with secret-named keys pruned from contents and tool config (tool
    declarations legitimately name fields such as ``password`` and are kept as given)."""
    raw = _object(raw, path, PREFIX_KEYS)
    system = raw.get("system_instruction")
    if system is not None and not isinstance(system, str):
        raise CacheInputError(f"{path}.system_instruction", "must be a string")
    tools = raw.get("tools", [])
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise CacheInputError(f"{path}.tools", f"must be an array of at most {MAX_TOOLS} tools")
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or not tool:
            raise CacheInputError(f"{path}.tools[{index}]", "must be a non-empty object")
    tool_config = raw.get("tool_config")
    if tool_config is not None and not isinstance(tool_config, dict):
        raise CacheInputError(f"{path}.tool_config", "must be an object")
    contents = raw.get("contents", [])
    if not isinstance(contents, list) or len(contents) > MAX_CONTENTS:
        raise CacheInputError(
            f"{path}.contents", f"must be an array of at most {MAX_CONTENTS} contents"
        )
    for index, content in enumerate(contents):
        _content(content, f"{path}.contents[{index}]")
    if not (system or tools or contents):
        raise CacheInputError(path, "needs a system_instruction, tools or contents")
    return Prefix(
        system_instruction=system or None,
        tools=tools,
        tool_config=prune_secrets(tool_config) if tool_config else None,
        contents=prune_secrets(contents),
    )


def parse_ttl(raw: Any, policy: CachePolicy, path: str = "ttl_ms") -> int:
    if raw is None:
        return policy.default_ttl_ms
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < MIN_TTL_MS:
        raise CacheInputError(path, f"must be an integer >= {MIN_TTL_MS}")
    if raw > policy.max_ttl_ms:
        raise CacheInputError(
            path,
            f"must not exceed the policy's max_ttl_ms ({policy.max_ttl_ms})",
            code="ttl_exceeds_max",
        )
    return raw
