"""Properties of the envelope (pure): the current input, and the request budget."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxadmin.canonical import canonical_json
from ctxadmin.pruning import has_secret_keys, prune_secrets
from sessions_app.context import envelope as env
from sessions_app.context.select import (
    EventMeta,
    select_history,
)
from tests.context_strategies import (
    FRAMING,
    current_inputs,
    flat_objects,
    histories,
    maybe,
    policies,
)


def history_item(meta: EventMeta) -> str:
    """Canonical JSON of exactly ``meta.context_bytes`` bytes, naming its event."""
    return f'[{meta.seq},"' + "x" * (meta.context_bytes - len(str(meta.seq)) - 5) + '"]'


@given(
    histories(),
    policies(),
    current_inputs,
    st.fixed_dictionaries(
        {
            "instructions": maybe(st.text(max_size=60)),
            "generation_config": maybe(flat_objects),
            "tools": maybe(st.lists(flat_objects, max_size=2)),
            "memory": st.lists(flat_objects, max_size=2),
        }
    ),
    st.integers(1024, 8000),
)
@settings(max_examples=150)
def test_the_envelope_holds_the_current_input_and_fits_the_request_budget(
    metas, policy, current_input, fixed, ceiling
):
    """``build_context`` minus the database: whatever the history and the budgets, the
    current input is sent (pruned) and the envelope's bytes stay within the request budget."""
    parts = env.fixed_parts(current_input=current_input, **fixed)
    sizes = env.fixed_sizes(parts)
    request_limit = policy.request_byte_limit(ceiling)
    room = request_limit - sum(sizes.values())
    if room < 0:  # refused before any history is read
        return
    selection = select_history(metas, policy, request_room_bytes=room, framing_per_item=FRAMING)
    history = [history_item(metas[i]) for i in selection.indices]
    envelope_json = env.assemble(parts, history)
    envelope = json.loads(envelope_json)
    assert envelope["current_input"] == prune_secrets(current_input)
    assert not has_secret_keys(envelope["current_input"])
    assert envelope["history"] == [json.loads(item) for item in history]
    assert envelope_json == canonical_json(envelope)  # spliced, yet canonical
    accounting = env.accounting(
        sizes, selection.history_bytes, len(history), policy.bytes_per_token
    )["bytes"]
    assert accounting["current_input"] == len(canonical_json(parts["current_input"]))
    assert len(envelope_json) <= accounting["total"] <= request_limit
