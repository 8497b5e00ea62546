"""Which path parameter an encoded ``/`` sits in, read from the path as sent (pure)."""

from __future__ import annotations

import pytest

from ctxadmin.api.paths import encoded_slash_error


@pytest.mark.parametrize(
    ("raw", "parameter"),
    [
        ("/api/v1/apps/demo/users/a%2Fb/sessions", "user"),
        ("/api/v1/apps/demo/users/a%2fb/state", "user"),
        ("/api/v1/apps/de%2Fmo/users/a/sessions", "app"),
        ("/api/v1/apps/demo/users/a/sessions/s%2F1", "sid"),
        ("/api/v1/apps/demo/users/a/sessions/s/artifacts/x%2Fy.txt", "name"),
        ("/api/v1/apps/demo/threads/t%2F1/checkpoints", "thread"),
        ("/dev/v1/context/demo/a%2Fb/s", "user"),
        ("/dev/v1/context/demo/a/s%2F1/lifecycle", "sid"),
        ("/dev/v1/memory/demo/a%2Fb", "user"),
        ("/api/v1/apps/demo/outbox/jobs/j%2F1", "job_id"),
        ("/api/v1/apps/demo/users/a/tool-tokens/p%2Fq", "prefix"),
        ("/api/v1/apps/demo/odd%2Fplace", "path"),
    ],
)
def test_an_encoded_slash_names_its_segment(raw, parameter):
    found = encoded_slash_error(raw)
    assert found is not None and found[0] == parameter
    assert found[1]


@pytest.mark.parametrize(
    "raw",
    [
        "/api/v1/apps/demo/users/a/sessions",
        "/api/v1/apps/demo/users/a%40b/sessions",
        "/api/v1/apps/demo/users/a/memories/search?query=a%2Fb",
    ],
)
def test_anything_else_is_left_to_routing(raw):
    assert encoded_slash_error(raw) is None
