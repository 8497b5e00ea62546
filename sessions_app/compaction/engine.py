"""The compaction engine (pure; no Django import): a run from its input to its outcome.

Its data live in ``model``, deciding and choosing the range in ``planning``, projecting
large responses in ``projection``.

Input: a session's events not hidden by a visible checkpoint (plus, for the sliding window,
the overlap it re-summarises), its visible checkpoints, the policy, a summarizer callable and
an absolute deadline. Output: an ``Outcome`` — ``skipped`` with a reason, ``error`` with a
typed code, or ``compacted`` with a checkpoint candidate (range, summary or projected items,
tokens before and after). Nothing given is mutated; the caller commits with compare-and-swap.

Steps:
1. decide: policy, triggers (token pressure, then event count, then turn interval, then the
   sliding window), automatic limits;
2. choose the range: the retained tail grows back from the newest event over
   ``retain_recent_exchanges`` complete units (or ``event_retention_size`` events) and the
   last two user events; the range before it never holds an open obligation (a function
   call without a response, a pending confirmation or credential request) nor splits a call
   from its response — the longest self-contained prefix. The sliding window takes whole
   invocations instead, with ``overlap_size`` of the previous window;
3. project large tool responses (audit retention): when that alone brings token pressure
   under the threshold, the checkpoint is ``pruned`` and no summarizer runs;
4. summarise, validate against the source (one repair call on an invalid reply);
5. re-measure: a checkpoint must reduce the effective context.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sessions_app.compaction.model import (
    SUMMARY_AUTHOR,
    CheckpointView,
    EngineInput,
    Outcome,
    Summarizer,
    SummarizerFailed,
    SummaryRequest,
    covered,
    effective_tokens,
    failed,
    item_tokens,
    skipped,
    source_fingerprint,
    tokens_of,
)
from sessions_app.compaction.planning import (
    Plan,
    bounded_plan,
    fired_triggers,
    plan_pinned,
    plan_prefix,
    plan_window,
)
from sessions_app.compaction.policy import CompactionPolicy
from sessions_app.compaction.projection import project_items
from sessions_app.compaction.summary import (
    SourceIndex,
    SummaryInvalid,
    SummaryTooLarge,
    cited_ids,
    render,
    validate_summary,
)


def source_index(plan: Plan) -> SourceIndex:
    lineage_ids: set[str] = set()
    lineage_requests: set[tuple[str, str]] = set()
    lineage_users: set[str] = set()
    tools: set[str] = set()
    for checkpoint in plan.absorbed:
        if checkpoint.summary:
            lineage_ids |= cited_ids(checkpoint.summary)
            tools.update(checkpoint.summary["tools"])
            for request in checkpoint.summary["user_requests"]:
                lineage_users.add(request["event_id"])
                if "excerpt" in request:
                    lineage_requests.add((request["event_id"], request["excerpt"]))
        lineage_requests |= checkpoint.lineage_requests
    for event in plan.events:
        tools.update(call["name"] for call in event.calls)
    return SourceIndex(
        first_seq=plan.first_seq,
        last_seq=plan.last_seq,
        event_ids=frozenset({e.event_id for e in plan.events} | lineage_ids),
        user_texts={e.event_id: e.text for e in plan.events if e.is_user},
        lineage_requests=frozenset(lineage_requests),
        lineage_user_ids=frozenset(lineage_users),
        tool_names=frozenset(tools),
    )


def summary_item(checkpoint_id: str, summary: dict) -> dict:
    return {
        "checkpoint_id": checkpoint_id,
        "author": SUMMARY_AUTHOR,
        "content": {"role": "model", "parts": [{"text": render(summary)}]},
        "coverage": summary["coverage"],
    }


def target_summary_bytes(policy: CompactionPolicy) -> int:
    """A quarter of the token threshold (at least 1 KiB), so a summary leaves room to grow."""
    if policy.token_threshold:
        quarter = max(1024, policy.token_threshold * policy.bytes_per_token // 4)
        return min(policy.max_summary_bytes, quarter)
    return policy.max_summary_bytes


def _target_bytes(plan: Plan, inp: EngineInput) -> int:
    target = target_summary_bytes(inp.policy)
    if inp.history_limit_bytes is None:
        return target
    absorbed = {c.id for c in plan.absorbed}
    rest = sum(c.tokens * inp.policy.bytes_per_token for c in inp.visible if c.id not in absorbed)
    rest += sum(
        e.context_bytes
        for e in inp.events
        if e.content and e.seq > plan.last_seq and not covered(e.seq, inp.visible)
    )
    # The rendered summary is wrapped in a history item (about 200 bytes) and reads longer
    # than its JSON; aim below what is left.
    return max(256, min(target, (inp.history_limit_bytes - rest) * 3 // 4 - 200))


def _merge_usage(total: dict, usage: dict) -> None:
    for key, value in usage.items():
        if isinstance(value, int):
            total[key] = total.get(key, 0) + value
    total["calls"] = total.get("calls", 0) + 1


def _summarise(
    plan: Plan, inp: EngineInput, summarizer: Summarizer, deadline: float, clock
) -> tuple[dict | None, dict, str, str]:
    """(summary, usage, error code, message): one call, and one repair on an invalid reply."""
    policy = inp.policy
    source = source_index(plan)
    request = SummaryRequest(
        first_seq=plan.first_seq,
        last_seq=plan.last_seq,
        events=plan.events,
        lineage=[c.summary for c in plan.absorbed if c.summary],
        source=source,
        max_bytes=policy.max_summary_bytes,
        target_bytes=_target_bytes(plan, inp),
        deadline=deadline,
    )
    usage: dict = {}
    for attempt in range(2):
        if clock() >= deadline:
            return None, usage, "deadline_exceeded", "The deadline passed before the summary."
        try:
            reply = summarizer(request)
        except SummarizerFailed as exc:
            _merge_usage(usage, exc.usage)
            return None, usage, exc.code, str(exc)
        _merge_usage(usage, reply.usage)
        if clock() >= deadline:
            return None, usage, "deadline_exceeded", "The summarizer answered after the deadline."
        try:
            return validate_summary(reply.summary, source, policy.max_summary_bytes), usage, "", ""
        except SummaryTooLarge as exc:
            error_code, error = "summary_too_large", str(exc)
        except SummaryInvalid as exc:
            error_code, error = "invalid_summary", str(exc)
        if attempt == 0:
            request = SummaryRequest(**{**request.__dict__, "repair": (reply.summary, error)})
    return None, usage, error_code, f"After one repair: {error}"


def compact(
    inp: EngineInput,
    summarizer: Summarizer,
    *,
    deadline: float,
    checkpoint_id: str,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    policy = inp.policy
    bpt = policy.bytes_per_token
    tokens = effective_tokens(inp.events, inp.visible, bpt) + inp.current_input_tokens
    automatic = inp.origin == "automatic"
    if automatic and not policy.automatic:
        return skipped("not_triggered", "Automatic compaction is off for this session.")
    fired = fired_triggers(inp, tokens)
    if automatic and not fired:
        return skipped("below_trigger", "No trigger reached its threshold.", tokens=tokens)
    trigger = fired[0] if fired else inp.origin
    if automatic:
        if inp.automatic.backing_off:
            return skipped(
                "automatic_limit", "Backing off after ineffective compactions.", trigger, tokens
            )
        if inp.automatic.recent_successes >= policy.max_automatic_per_hour:
            return skipped(
                "automatic_limit",
                "The hourly limit of automatic compactions is reached.",
                trigger,
                tokens,
            )
        mark = max((c.high_water_seq for c in inp.visible), default=0)
        new_tokens = sum(
            tokens_of(e.context_bytes, bpt) for e in inp.events if e.seq > mark and e.content
        )
        if inp.visible and new_tokens < policy.min_new_tokens:
            return skipped(
                "insufficient_new_tokens",
                "Too few new tokens since the last compaction.",
                trigger,
                tokens,
            )

    if inp.pinned is not None:
        plan = plan_pinned(inp)
        if plan is None:
            return failed(
                "compaction_conflict",
                "The named events are not the oldest uncovered events, in order, self-contained.",
                trigger,
            )
    else:
        plan = plan_window(inp) if trigger == "sliding_window" else plan_prefix(inp)
    if plan is None:
        if automatic:
            return skipped(
                "insufficient_history", "Nothing before the retained events.", trigger, tokens
            )
        return failed("nothing_to_compact", "Nothing before the retained events.", trigger)
    bounded = bounded_plan(plan, policy)
    if bounded is None:
        return failed(
            "input_too_large",
            "The first unit to summarise exceeds max_input_events or max_input_bytes.",
            trigger,
        )
    plan = bounded
    if clock() >= deadline:
        return failed("deadline_exceeded", "The deadline passed while planning.", trigger)

    base = {
        "trigger": trigger,
        "first_seq": plan.first_seq,
        "last_seq": plan.last_seq,
        "source_event_ids": tuple(e.event_id for e in plan.events),
        "source_fingerprint": source_fingerprint(plan.events, plan.absorbed),
        "absorbed": tuple(c.id for c in plan.absorbed),
        "tokens_before": tokens,
        "window_end_invocation": plan.window_end_invocation,
    }
    remaining = [c for c in inp.visible if c.id not in base["absorbed"]]

    def after(items_tokens: int) -> int:
        candidate = CheckpointView("", plan.first_seq, plan.last_seq, "", items_tokens)
        return effective_tokens(inp.events, [*remaining, candidate], bpt) + inp.current_input_tokens

    # Projection: large tool responses replaced by their hash, size and stored original.
    over = policy.project_tool_responses_over_bytes
    if (
        over is not None
        and policy.retention == "audit"
        and not plan.absorbed
        and trigger in ("token_threshold", "overflow", "manual")
    ):
        items, projected = project_items(plan.events, over)
        if projected:
            projected_tokens = sum(item_tokens(i, bpt) for i in items if i.get("content"))
            tokens_after = after(projected_tokens)
            threshold = policy.token_threshold or 0
            if tokens_after < threshold and tokens - tokens_after >= policy.min_reclaim_tokens:
                return Outcome(
                    "compacted",
                    representation="pruned",
                    items=tuple(items),
                    tokens_after=tokens_after,
                    projected=tuple(projected),
                    **base,
                )

    summary, usage, code, message = _summarise(plan, inp, summarizer, deadline, clock)
    if summary is None:
        return failed(code, message, trigger, usage=usage, tokens_before=tokens)
    item = summary_item(checkpoint_id, summary)
    tokens_after = after(item_tokens(item, bpt))
    if tokens_after >= tokens or tokens - tokens_after < policy.min_reclaim_tokens:
        return failed(
            "ineffective_compaction",
            f"The summary reclaims {tokens - tokens_after} tokens; at least "
            f"{max(1, policy.min_reclaim_tokens)} are needed.",
            trigger,
            usage=usage,
            tokens_before=tokens,
            tokens_after=tokens_after,
        )
    return Outcome(
        "compacted",
        representation="summary",
        summary=summary,
        items=(item,),
        tokens_after=tokens_after,
        usage=usage,
        **base,
    )
