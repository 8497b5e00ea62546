"""An artifact version's display name: given with a JSON save, answered (as given, or null)
by the save, the load, the version list and the attach; bounded; raw saves have none."""

from __future__ import annotations

import base64

import pytest

from sessions_app.artifacts import rules
from tests.sessions_app.test_artifacts import base, error, make_session, save_json, save_raw
from tests.sessions_app.test_sessions_schema import check

pytestmark = pytest.mark.django_db


def test_a_display_name_round_trips_through_every_answer(owner):
    make_session(owner)
    api = owner.client()
    url = f"{base()}/photo.png"
    saved = save_json(api, url, b"\x89PNG", "image/png", display_name="Holiday photo · 2026.png")
    assert saved.status_code == 201, saved.content
    check("ArtifactVersion", saved.json())
    assert saved.json()["display_name"] == "Holiday photo · 2026.png"
    second = save_json(api, url, b"\x89PNG2", "image/png")
    assert second.json()["display_name"] is None

    loaded = api.get(url, {"version": "0"})
    check("ArtifactContent", loaded.json())
    assert loaded.json()["display_name"] == "Holiday photo · 2026.png"
    assert api.get(url).json()["display_name"] is None
    versions = api.get(f"{url}/versions").json()["results"]
    assert [v["display_name"] for v in versions] == ["Holiday photo · 2026.png", None]


def test_a_raw_save_has_no_display_name(owner):
    make_session(owner)
    api = owner.client()
    saved = save_raw(api, f"{base()}/raw.bin?format=raw", b"\x00\x01", "application/x-thing")
    assert saved.status_code == 201, saved.content
    assert saved.json()["display_name"] is None


@pytest.mark.parametrize(
    "bad",
    [7, "x" * (rules.MAX_DISPLAY_NAME_LENGTH + 1), ["a"]],
)
def test_a_bad_display_name_is_refused_and_nothing_saved(owner, bad):
    make_session(owner)
    api = owner.client()
    body = {"data_base64": base64.b64encode(b"x").decode(), "mime_type": "text/plain"}
    answer = api.post(f"{base()}/bad.txt", {**body, "display_name": bad}, format="json")
    assert error(answer, 400, "validation_error")["details"]["field"] == "display_name"
    assert api.get(f"{base()}/bad.txt").status_code == 404
