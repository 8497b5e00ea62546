"""A path segment holding an encoded ``/`` is 400 ``invalid_path_parameter`` naming the
segment, over REST as sent and through the client (which encodes a ``/`` in an id), never a
404 or another endpoint's answer."""

from __future__ import annotations

import httpx
import pytest
from ctxadmin_client import Client, ValidationError


@pytest.mark.parametrize(
    ("tail", "parameter"),
    [
        ("users/team%2Falice/sessions", "user"),
        ("users/team%2falice/state", "user"),
        # Decoded, this one would be user "a"'s session "sessions".
        ("users/a%2Fsessions/sessions", "user"),
        ("users/alice/sessions/s%2F1/events", "sid"),
        ("users/alice/sessions/s1/artifacts/a%2Fb.txt", "name"),
    ],
)
def test_rest_refuses_an_encoded_slash_in_a_segment(app, tail, parameter):
    url = f"{app.base_url}/api/v1/apps/{app.name}/{tail}"
    answer = httpx.get(url, headers={"Authorization": f"Bearer {app.key}"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_path_parameter"
    assert error["details"] == {"parameter": parameter}


def test_the_client_refuses_a_user_id_with_a_slash(app):
    with Client(app.base_url, app.key) as client:
        with pytest.raises(ValidationError) as caught:
            client.get_session(app.name, "team/alice", "s1")
        assert caught.value.code == "invalid_path_parameter"
        assert caught.value.details == {"parameter": "user"}
        with pytest.raises(ValidationError):
            client.create_session(app.name, "team/alice")
        with pytest.raises(ValidationError):
            client.delete_session(app.name, "alice", "a/b")
