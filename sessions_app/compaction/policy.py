"""The compaction policy (pure; no Django import).

One app default, optionally overridden per session (the override replaces the default
whole). ``parse_compaction_policy`` validates strictly: an unknown key, a zero or negative value, no
trigger enabled, ``retain_recent_exchanges`` above ``max_input_events`` or
``overlap_size >= compaction_interval`` raise ``PolicyError`` naming the field.

    {"token_threshold": 8000,          # estimated tokens of the effective context
     "event_threshold": null,          # uncovered content events
     "turn_interval": null,            # user turns since the last compaction
     "compaction_interval": null,      # ADK sliding window: new invocations ...
     "overlap_size": 0,                # ... re-summarised from the previous window
     "retain_recent_exchanges": 4,     # complete units kept raw (or event_retention_size)
     "event_retention_size": null,
     "timeout_ms": 10000, "max_summary_bytes": 16384,
     "max_input_events": 5000, "max_input_bytes": 4194304,
     "summarizer": {"kind": "extractive"}
                 | {"kind": "gemini" | "openai_compatible" | "anthropic",
                    "connection": NAME, "model": MODEL, "max_output_tokens": N},
     "retention": "audit" | "purge",
     "automatic": true,
     "project_tool_responses_over_bytes": 8192,
     "min_new_tokens": 0, "min_reclaim_tokens": 32,
     "max_automatic_per_hour": 60, "bytes_per_token": 4}
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ctxadmin.pruning import echoed
from sessions_app.context.policy import PolicyError

SUMMARIZER_KINDS = ("extractive", "gemini", "openai_compatible", "anthropic")
RETENTION_MODES = ("audit", "purge")
TRIGGERS = ("token_threshold", "event_threshold", "turn_interval", "sliding_window")
_CONNECTION = re.compile(r"^[a-z0-9_-]{1,64}\Z")
_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}\Z")

# Upper bounds of the numeric fields: generous, but a typo cannot ask for the impossible.
LIMITS = {
    "token_threshold": 10_000_000,
    "event_threshold": 1_000_000,
    "turn_interval": 100_000,
    "compaction_interval": 100_000,
    "overlap_size": 100_000,
    "retain_recent_exchanges": 10_000,
    "event_retention_size": 100_000,
    "timeout_ms": 600_000,
    "max_summary_bytes": 1024 * 1024,
    "max_input_events": 100_000,
    "max_input_bytes": 64 * 1024 * 1024,
    "project_tool_responses_over_bytes": 64 * 1024 * 1024,
    "min_new_tokens": 10_000_000,
    "min_reclaim_tokens": 10_000_000,
    "max_automatic_per_hour": 10_000,
    "bytes_per_token": 64,
}
# Fields that may be 0 (0 turns the feature off); every other number must be positive.
ZERO_ALLOWED = frozenset({"overlap_size", "min_new_tokens", "min_reclaim_tokens"})
NULLABLE = frozenset(
    {
        "token_threshold",
        "event_threshold",
        "turn_interval",
        "compaction_interval",
        "retain_recent_exchanges",
        "event_retention_size",
        "project_tool_responses_over_bytes",
    }
)


@dataclass(frozen=True)
class SummarizerSpec:
    kind: str = "extractive"
    connection: str | None = None
    model: str | None = None
    max_output_tokens: int | None = None

    def as_dict(self) -> dict:
        return {key: value for key, value in asdict(self).items() if value is not None}


@dataclass(frozen=True)
class CompactionPolicy:
    token_threshold: int | None = 8000
    event_threshold: int | None = None
    turn_interval: int | None = None
    compaction_interval: int | None = None
    overlap_size: int = 0
    retain_recent_exchanges: int | None = 4
    event_retention_size: int | None = None
    timeout_ms: int = 10_000
    max_summary_bytes: int = 16 * 1024
    max_input_events: int = 5000
    max_input_bytes: int = 4 * 1024 * 1024
    summarizer: SummarizerSpec = field(default_factory=SummarizerSpec)
    retention: str = "audit"
    automatic: bool = True
    project_tool_responses_over_bytes: int | None = 8192
    min_new_tokens: int = 0
    min_reclaim_tokens: int = 32
    max_automatic_per_hour: int = 60
    bytes_per_token: int = 4

    @property
    def prefix_triggers(self) -> bool:
        return bool(self.token_threshold or self.event_threshold or self.turn_interval)

    def as_dict(self) -> dict:
        data = asdict(self)
        data["summarizer"] = self.summarizer.as_dict()
        return data


DEFAULT_POLICY = CompactionPolicy()
POLICY_KEYS = frozenset(CompactionPolicy.__dataclass_fields__)
_SUMMARIZER_KEYS = frozenset({"kind", "connection", "model", "max_output_tokens"})


def _number(value: Any, path: str, name: str) -> int | None:
    if value is None:
        if name in NULLABLE:
            return None
        raise PolicyError(path, "must be an integer")
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(path, "must be an integer")
    minimum = 0 if name in ZERO_ALLOWED else 1
    if value < minimum:
        raise PolicyError(path, f"must be {'>= 0' if minimum == 0 else 'positive'}")
    if value > LIMITS[name]:
        raise PolicyError(path, f"must be at most {LIMITS[name]}")
    return value


def _summarizer(value: Any, connections: frozenset[str] | None) -> SummarizerSpec:
    if not isinstance(value, dict):
        raise PolicyError("summarizer", "must be an object")
    unknown = sorted(set(value) - _SUMMARIZER_KEYS)
    if unknown:
        raise PolicyError(f"summarizer.{echoed(unknown[0])}", "unknown field")
    kind = value.get("kind", "extractive")
    if kind not in SUMMARIZER_KINDS:
        raise PolicyError("summarizer.kind", f"must be one of {list(SUMMARIZER_KINDS)}")
    if kind == "extractive":
        extra = sorted(set(value) - {"kind"})
        if extra:
            raise PolicyError(f"summarizer.{extra[0]}", "is not used by the extractive summarizer")
        return SummarizerSpec()
    connection, model = value.get("connection"), value.get("model")
    if not isinstance(connection, str) or not _CONNECTION.match(connection):
        raise PolicyError("summarizer.connection", "must name a provider connection")
    if connections is not None and connection not in connections:
        raise PolicyError(
            "summarizer.connection", f"no provider connection {connection!r} is configured"
        )
    if not isinstance(model, str) or not _MODEL.match(model):
        raise PolicyError("summarizer.model", "must be a model name")
    max_output = value.get("max_output_tokens")
    if max_output is not None and (
        isinstance(max_output, bool)
        or not isinstance(max_output, int)
        or not 1 <= max_output <= 65536
    ):
        raise PolicyError("summarizer.max_output_tokens", "must be an integer from 1 to 65536")
    return SummarizerSpec(kind, connection, model, max_output)


def parse_compaction_policy(
    body: Any, *, connections: frozenset[str] | None = None, base: CompactionPolicy | None = None
) -> CompactionPolicy:
    """A policy from ``body``; missing fields take ``base``'s values (the defaults when
    None). ``connections``: the provider connections configured, to check the summarizer's."""
    if not isinstance(body, dict):
        raise PolicyError("policy", "must be a JSON object")
    unknown = sorted(set(body) - POLICY_KEYS)
    if unknown:
        raise PolicyError(echoed(unknown[0]), "unknown field")
    values = (base or DEFAULT_POLICY).as_dict()
    values.pop("summarizer")
    summarizer = (base or DEFAULT_POLICY).summarizer
    for name, value in body.items():
        if name == "summarizer":
            summarizer = _summarizer(value, connections)
        elif name == "retention":
            if value not in RETENTION_MODES:
                raise PolicyError("retention", f"must be one of {list(RETENTION_MODES)}")
            values[name] = value
        elif name == "automatic":
            if not isinstance(value, bool):
                raise PolicyError("automatic", "must be true or false")
            values[name] = value
        else:
            values[name] = _number(value, name, name)
    # The two retention fields are alternatives: naming one clears the other.
    if body.get("event_retention_size") is not None:
        if body.get("retain_recent_exchanges") is not None:
            raise PolicyError(
                "event_retention_size", "set either retain_recent_exchanges or event_retention_size"
            )
        values["retain_recent_exchanges"] = None
    elif body.get("retain_recent_exchanges") is not None:
        values["event_retention_size"] = None
    policy = CompactionPolicy(**values, summarizer=summarizer)
    _check_consistency(policy, set(body))
    return policy


def _check_consistency(policy: CompactionPolicy, given: set[str]) -> None:
    if not policy.prefix_triggers and not policy.compaction_interval:
        raise PolicyError(
            "policy",
            "no trigger is enabled: set token_threshold, event_threshold, turn_interval "
            "or compaction_interval",
        )
    retained = policy.event_retention_size or policy.retain_recent_exchanges or 0
    if retained > policy.max_input_events:
        field_name = (
            "event_retention_size" if policy.event_retention_size else "retain_recent_exchanges"
        )
        raise PolicyError(field_name, "must not be larger than max_input_events")
    if policy.compaction_interval is not None and policy.overlap_size >= policy.compaction_interval:
        raise PolicyError("overlap_size", "must be smaller than compaction_interval")
    if policy.compaction_interval is None and "overlap_size" in given and policy.overlap_size:
        raise PolicyError("overlap_size", "needs compaction_interval")
