"""Artifacts: save, load, versions, names and delete over the API (JSON and raw bodies); the
``user:`` namespace; limits and validation in the one envelope with nothing half-applied;
tenancy; session deletion; the console showing no content; the name and mime rules."""

from __future__ import annotations

import base64
import hashlib

import pytest
from django.contrib.auth import get_user_model

from ctxadmin.errors import ServiceError
from ctxadmin.services import create_api_key
from sessions_app.artifacts import rules, services
from sessions_app.artifacts.models import ArtifactHead, ArtifactVersion
from tests.sessions_app.test_sessions_schema import check

pytestmark = pytest.mark.django_db

MARKER = b"\x00zebra-quokka-7731\xff artifact bytes"


def base(app: str = "acme", user: str = "alice", sid: str = "s1") -> str:
    return f"/api/v1/apps/{app}/users/{user}/sessions/{sid}/artifacts"


def make_session(tenant, user: str = "alice", sid: str = "s1") -> None:
    created = tenant.client().post(
        f"/api/v1/apps/{tenant.app.name}/users/{user}/sessions", {"session_id": sid}, format="json"
    )
    assert created.status_code == 201, created.content


def save_json(client, url: str, data: bytes, mime: str = "text/plain", **extra):
    body = {"data_base64": base64.b64encode(data).decode(), "mime_type": mime, **extra}
    check("ArtifactSave", body)
    return client.post(url, body, format="json")


def save_raw(client, url: str, data: bytes, content_type: str):
    return client.generic("POST", url, data, content_type=content_type)


def error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return body["error"]


def counts() -> tuple[int, int]:
    return ArtifactHead.objects.count(), ArtifactVersion.objects.count()


def test_save_load_list_versions_and_delete(owner):
    make_session(owner)
    api = owner.client()
    url = f"{base()}/notes.txt"

    first = save_json(api, url, b"one", custom_metadata={"source": "tool", "n": 1})
    assert first.status_code == 201, first.content
    check("ArtifactVersion", first.json())
    assert first.json() == {
        "name": "notes.txt",
        "scope": "session",
        "version": 0,
        "mime_type": "text/plain",
        "size": 3,
        "sha256": hashlib.sha256(b"one").hexdigest(),
        "created_at": first.json()["created_at"],
        "custom_metadata": {"source": "tool", "n": 1},
        "display_name": None,
    }
    second = save_json(api, url, b"two!", mime="text/markdown")
    assert second.json()["version"] == 1 and second.json()["custom_metadata"] is None

    latest = api.get(url)
    assert latest.status_code == 200
    check("ArtifactContent", latest.json())
    assert latest.json()["version"] == 1
    assert base64.b64decode(latest.json()["data_base64"]) == b"two!"
    assert latest.json()["mime_type"] == "text/markdown"
    older = api.get(url, {"version": 0}).json()
    assert base64.b64decode(older["data_base64"]) == b"one"
    assert older["custom_metadata"] == {"source": "tool", "n": 1}

    versions = api.get(f"{url}/versions")
    assert versions.status_code == 200
    check("ArtifactVersionPage", versions.json())
    assert [v["version"] for v in versions.json()["results"]] == [0, 1]
    assert "data_base64" not in versions.content.decode()

    save_json(api, f"{base()}/a.bin", b"x", mime="application/octet-stream")
    names = api.get(base())
    check("ArtifactNamePage", names.json())
    assert [(n["name"], n["latest_version"]) for n in names.json()["results"]] == [
        ("a.bin", 0),
        ("notes.txt", 1),
    ]

    assert api.delete(url).status_code == 204
    error(api.get(url), 404, "not_found")
    error(api.get(f"{url}/versions"), 404, "not_found")
    error(api.delete(url), 404, "not_found")
    assert [n["name"] for n in api.get(base()).json()["results"]] == ["a.bin"]
    # A deleted name starts again at version 0 (ADK semantics).
    assert save_json(api, url, b"again").json()["version"] == 0


def test_raw_bodies_and_raw_downloads(owner):
    make_session(owner)
    api = owner.client()
    url = f"{base()}/image.png"
    saved = save_raw(api, url, MARKER, "image/png")
    assert saved.status_code == 201, saved.content
    assert saved.json()["mime_type"] == "image/png"
    assert saved.json()["size"] == len(MARKER)
    assert saved.json()["sha256"] == hashlib.sha256(MARKER).hexdigest()

    raw = api.get(url, {"format": "raw"}, HTTP_ACCEPT="image/png")
    assert raw.status_code == 200
    assert raw.content == MARKER
    assert raw["Content-Type"] == "image/png"
    assert raw["ETag"] == f'"{hashlib.sha256(MARKER).hexdigest()}"'
    assert raw["X-Artifact-Version"] == "0"
    assert raw["Content-Disposition"] == 'attachment; filename="image.png"'
    as_json = api.get(url, {"format": "json"}, HTTP_ACCEPT="image/png")
    assert base64.b64decode(as_json.json()["data_base64"]) == MARKER

    # Parameters of the media type are kept; no Content-Type stores octet-stream.
    text = save_raw(api, f"{base()}/t.txt", "héllo".encode(), "text/plain; charset=utf-8")
    assert text.json()["mime_type"] == "text/plain; charset=utf-8"
    assert api.get(f"{base()}/t.txt", {"format": "raw"})["Content-Type"] == (
        "text/plain; charset=utf-8"
    )
    untyped = api.generic("POST", f"{base()}/blob", b"\x01\x02", content_type="")
    assert untyped.json()["mime_type"] == "application/octet-stream"
    empty = save_raw(api, f"{base()}/empty", b"", "application/octet-stream")
    assert empty.status_code == 201 and empty.json()["size"] == 0
    assert api.get(f"{base()}/empty", {"format": "raw"}).content == b""

    # format=raw stores a JSON document as it is instead of reading it as a save body.
    document = b'{"data_base64": "AAAA", "mime_type": "text/plain"}'
    stored = api.generic("POST", f"{url}?format=raw", document, content_type="application/json")
    assert stored.status_code == 201
    assert stored.json()["version"] == 1 and stored.json()["mime_type"] == "application/json"
    assert api.get(url, {"format": "raw"}).content == document
    assert api.get(url, {"format": "raw", "version": "0"}).content == MARKER


def test_user_names_are_shared_by_every_session_of_the_user(owner):
    make_session(owner, sid="s1")
    make_session(owner, sid="s2")
    api = owner.client()
    saved = save_json(api, f"{base(sid='s1')}/user:profile.json", b"{}", "application/json")
    assert saved.status_code == 201
    assert saved.json()["scope"] == "user"
    save_json(api, f"{base(sid='s1')}/draft.md", b"s1 only")

    from_s2 = api.get(f"{base(sid='s2')}/user:profile.json")
    assert from_s2.status_code == 200 and from_s2.json()["name"] == "user:profile.json"
    error(api.get(f"{base(sid='s2')}/draft.md"), 404, "not_found")
    listed = api.get(base(sid="s2")).json()["results"]
    assert [(n["name"], n["scope"]) for n in listed] == [("user:profile.json", "user")]
    assert [n["name"] for n in api.get(base(sid="s1")).json()["results"]] == [
        "draft.md",
        "user:profile.json",
    ]

    # A user: name needs no session: save, load, list and delete from any session id.
    again = save_json(api, f"{base(sid='nowhere')}/user:profile.json", b"{}", "application/json")
    assert again.status_code == 201 and again.json()["version"] == 1
    assert [n["name"] for n in api.get(base(sid="nowhere")).json()["results"]] == [
        "user:profile.json"
    ]
    versions = api.get(f"{base(sid='s2')}/user:profile.json/versions").json()["results"]
    assert [v["version"] for v in versions] == [0, 1]
    assert api.delete(f"{base(sid='nowhere')}/user:profile.json").status_code == 204
    error(api.get(f"{base(sid='s1')}/user:profile.json"), 404, "not_found")

    # A session-scoped name needs its session: nothing is written.
    before = counts()
    error(save_json(api, f"{base(sid='nowhere')}/draft.md", b"x"), 404, "not_found")
    error(save_raw(api, f"{base(sid='nowhere')}/draft.md", b"x", "text/plain"), 404, "not_found")
    assert counts() == before


def test_names_page_by_cursor(owner):
    make_session(owner)
    api = owner.client()
    for name in ("c", "user:b", "a", "user:a", "b"):
        assert save_json(api, f"{base()}/{name}", b"x").status_code == 201
    seen = []
    url = f"{base()}?limit=2"
    while url:
        page = api.get(url).json()
        assert len(page["results"]) <= 2
        seen += [n["name"] for n in page["results"]]
        url = page["next"]
    assert seen == ["a", "b", "c", "user:a", "user:b"]
    error(api.get(base(), {"limit": "0"}), 400, "invalid_parameter")
    error(api.get(base(), {"cursor": "junk"}), 400, "invalid_cursor")


@pytest.mark.parametrize(
    "name",
    ["..", "a..b", ".hidden", "-x", "_x", "user:", "user:.x", "a b", "a%5Cb", "é", "x" * 257],
)
def test_bad_names_are_refused_in_the_path(owner, name):
    make_session(owner)
    response = save_json(owner.client(), f"{base()}/{name}", b"x")
    details = error(response, 400, "invalid_path_parameter")["details"]
    assert details == {"parameter": "name"}
    assert counts() == (0, 0)


def test_names_with_slashes_match_no_route(owner):
    make_session(owner)
    api = owner.client()
    for path in ("a/b", "%2Fetc", "a%2F..%2Fb"):
        error(save_json(api, f"{base()}/{path}", b"x"), 404, "not_found")
    assert counts() == (0, 0)


def test_the_longest_name_and_odd_but_valid_names_work(owner):
    make_session(owner)
    api = owner.client()
    for name in ("x" * 256, "user:" + "y" * 251, "a.b.c", "v1:draft@2", "user:user:x"):
        saved = save_json(api, f"{base()}/{name}", b"x")
        assert saved.status_code == 201, (name, saved.content)
        assert api.get(f"{base()}/{name}").json()["name"] == name


def test_body_validation_refuses_with_nothing_written(owner):
    make_session(owner)
    api = owner.client()
    url = f"{base()}/f.txt"
    good = {"data_base64": "aGk=", "mime_type": "text/plain"}
    cases = [
        ({**good, "extra": 1}, "extra"),
        ({"mime_type": "text/plain"}, "data_base64"),
        ({**good, "data_base64": 5}, "data_base64"),
        ({**good, "data_base64": "not base64!"}, "data_base64"),
        ({**good, "data_base64": "aGk"}, "data_base64"),
        ({"data_base64": "aGk="}, "mime_type"),
        ({**good, "mime_type": "text"}, "mime_type"),
        ({**good, "mime_type": "text/plain\r\nX-Evil: 1"}, "mime_type"),
        ({**good, "mime_type": "a/" + "b" * 300}, "mime_type"),
        ({**good, "custom_metadata": []}, "custom_metadata"),
        ({**good, "custom_metadata": {"": 1}}, "custom_metadata"),
        ({**good, "custom_metadata": {"k": "v" * 5000}}, "custom_metadata"),
        ([good], "body"),
    ]
    for body, field in cases:
        details = error(api.post(url, body, format="json"), 400, "validation_error")["details"]
        assert details["field"] == field, (body, details)
    error(api.post(url, b"{,", content_type="application/json"), 400, "malformed_json")
    error(save_raw(api, url, b"x", "no-slash"), 400, "validation_error")
    assert counts() == (0, 0)


def test_secret_named_metadata_keys_are_dropped(owner):
    make_session(owner)
    api = owner.client()
    metadata = {"source": "upload", "api_key": "sk-123", "nested": {"clientSecret": "x", "k": 1}}
    saved = save_json(api, f"{base()}/f", b"x", custom_metadata=metadata)
    assert saved.json()["custom_metadata"] == {"source": "upload", "nested": {"k": 1}}
    assert "sk-123" not in api.get(f"{base()}/f").content.decode()
    assert ArtifactVersion.objects.get().custom_metadata == {"source": "upload", "nested": {"k": 1}}


def test_size_and_version_limits(owner, settings):
    make_session(owner)
    api = owner.client()
    settings.CTXADMIN_ARTIFACT_MAX_BYTES = 10
    url = f"{base()}/f.bin"
    refused = error(
        save_raw(api, url, b"x" * 11, "application/octet-stream"), 413, "artifact_too_large"
    )
    assert refused["details"] == {"field": "data", "size": 11, "limit_bytes": 10}
    refused = error(save_json(api, url, b"x" * 11), 413, "artifact_too_large")
    assert refused["details"]["limit_bytes"] == 10
    assert counts() == (0, 0)
    assert save_raw(api, url, b"x" * 10, "application/octet-stream").status_code == 201

    settings.CTXADMIN_ARTIFACT_MAX_VERSIONS = 2
    assert save_json(api, url, b"y").json()["version"] == 1
    limited = error(save_json(api, url, b"z"), 409, "artifact_version_limit")
    assert limited["details"] == {"limit_versions": 2}
    assert counts() == (1, 2)
    assert ArtifactHead.objects.get().next_version == 2
    # Another name of the session is not held back.
    assert save_json(api, f"{base()}/other", b"z").status_code == 201

    settings.CTXADMIN_MAX_BODY_BYTES = 2048
    error(save_raw(api, f"{base()}/big", b"x" * 4096, "text/plain"), 413, "request_too_large")


def test_query_parameters_are_strict(owner):
    make_session(owner)
    api = owner.client()
    url = f"{base()}/f"
    save_json(api, url, b"x")
    error(api.get(url, {"version": "1"}), 404, "not_found")
    for value in ("-1", "x", "1.0", "\u0661", "9" * 10):
        error(api.get(url, {"version": value}), 400, "invalid_parameter")
    error(api.get(url, {"format": "xml"}), 400, "invalid_parameter")
    error(api.get(url, {"other": "1"}), 400, "unknown_parameter")
    error(
        api.post(f"{url}?version=0", {"data_base64": "", "mime_type": "a/b"}),
        400,
        "unknown_parameter",
    )
    error(api.delete(f"{url}?format=raw"), 400, "unknown_parameter")
    error(api.get(f"{url}/versions", {"version": "0"}), 400, "unknown_parameter")
    assert ArtifactVersion.objects.count() == 1


def test_tenancy_other_app_user_and_session_get_404(owner, outsider):
    make_session(owner, sid="s1")
    make_session(owner, sid="s2")
    make_session(owner, user="bob", sid="s1")
    make_session(outsider, sid="s1")
    api = owner.client()
    save_json(api, f"{base()}/secret.txt", MARKER)
    save_json(api, f"{base()}/user:mine", MARKER)

    for url in (
        f"{base(app='globex')}/secret.txt",
        f"{base(user='bob')}/secret.txt",
        f"{base(sid='s2')}/secret.txt",
        f"{base(user='bob')}/user:mine",
    ):
        for client in (owner.client(), outsider.client()):
            error(client.get(url), 404, "not_found")
            error(client.get(f"{url}/versions"), 404, "not_found")
            error(client.delete(url), 404, "not_found")
    error(outsider.client().get(f"{base()}/secret.txt"), 404, "not_found")
    error(outsider.client().get(base()), 404, "not_found")
    error(save_json(outsider.client(), f"{base()}/secret.txt", b"x"), 404, "not_found")
    assert api.get(base(user="bob")).json()["results"] == []
    assert outsider.client().get(base(app="globex")).json()["results"] == []
    assert ArtifactVersion.objects.count() == 2

    _key, memory_only = create_api_key(owner.app, ["memory"])
    client = owner.client(memory_only)
    for response in (
        client.get(base()),
        client.get(f"{base()}/secret.txt"),
        client.get(f"{base()}/secret.txt/versions"),
        client.delete(f"{base()}/secret.txt"),
        save_json(client, f"{base()}/x", b"x"),
    ):
        assert "sessions" in error(response, 403, "permission_denied")["message"]
    assert ArtifactVersion.objects.count() == 2


def test_deleting_a_session_deletes_its_artifacts_and_keeps_the_users(owner):
    make_session(owner, sid="s1")
    make_session(owner, sid="s2")
    api = owner.client()
    save_json(api, f"{base(sid='s1')}/a", b"1")
    save_json(api, f"{base(sid='s1')}/a", b"2")
    save_json(api, f"{base(sid='s2')}/a", b"3")
    save_json(api, f"{base(sid='s1')}/user:keep", b"4")
    assert api.delete("/api/v1/apps/acme/users/alice/sessions/s1").status_code == 204
    assert sorted(ArtifactHead.objects.values_list("name", "session__session_id")) == [
        ("a", "s2"),
        ("user:keep", None),
    ]
    assert ArtifactVersion.objects.count() == 2
    error(api.get(f"{base(sid='s1')}/a"), 404, "not_found")
    assert api.get(f"{base(sid='s2')}/user:keep").status_code == 200
    # The same session id made again starts with no artifacts of the old one.
    make_session(owner, sid="s1")
    assert [n["name"] for n in api.get(base(sid="s1")).json()["results"]] == ["user:keep"]


def test_the_console_lists_artifacts_without_content(owner, outsider, client):
    make_session(owner)
    make_session(outsider)
    api = owner.client()
    save_raw(api, f"{base()}/photo.png", MARKER, "image/png")
    save_json(api, f"{base()}/user:notes", MARKER, custom_metadata={"memo": "wombat-metadata-55"})
    save_json(outsider.client(), f"{base(app='globex')}/theirs", b"x")
    operator = get_user_model().objects.create_superuser("op", password="op-pass-123456")
    client.force_login(operator)
    version = ArtifactVersion.objects.filter(head__name="photo.png").get()
    head = version.head
    pages = {
        "/admin/artifacts/artifacthead/": ["photo.png", "user:notes", "theirs"],
        f"/admin/artifacts/artifacthead/{head.pk}/change/": ["photo.png"],
        "/admin/artifacts/artifactversion/": ["photo.png", "image/png", version.sha256],
        f"/admin/artifacts/artifactversion/{version.pk}/change/": [version.sha256, "image/png"],
        f"/admin/artifacts/artifactversion/?head__app__id__exact={owner.app.pk}": ["photo.png"],
        f"/admin/artifacts/artifacthead/?app__id__exact={outsider.app.pk}": ["theirs"],
    }
    marker_text = MARKER.decode("latin-1")
    for page, expected in pages.items():
        response = client.get(page)
        assert response.status_code == 200, page
        html = response.content.decode()
        for text in expected:
            assert text in html, (page, text)
        for secret in (
            "zebra-quokka-7731",
            marker_text,
            base64.b64encode(MARKER).decode(),
            MARKER.hex(),
            "wombat-metadata-55",
        ):
            assert secret not in html, (page, secret)
    filtered = client.get(f"/admin/artifacts/artifactversion/?head__app__id__exact={owner.app.pk}")
    assert "theirs" not in filtered.content.decode()
    assert client.get("/admin/artifacts/artifactversion/add/").status_code == 403


def test_services_take_the_scope_explicitly(owner):
    make_session(owner)
    info = services.save_artifact(owner.app, "alice", "s1", "n.txt", b"abc", "text/plain")
    assert (info.name, info.version, info.size, info.scope) == ("n.txt", 0, 3, "session")
    services.save_artifact(owner.app, "alice", "s1", "n.txt", b"abcd", "text/plain", {"a": 1})
    loaded = services.load_artifact(owner.app, "alice", "s1", "n.txt")
    assert (loaded.data, loaded.info.version, loaded.info.custom_metadata) == (b"abcd", 1, {"a": 1})
    assert services.load_artifact(owner.app, "alice", "s1", "n.txt", 0).data == b"abc"
    versions = services.list_artifact_versions(owner.app, "alice", "s1", "n.txt")
    assert list(versions.values_list("version", flat=True)) == [0, 1]
    names = services.list_artifact_names(owner.app, "alice", "s1")
    assert list(names.values_list("name", flat=True)) == ["n.txt"]
    with pytest.raises(ServiceError) as refused:
        services.save_artifact(owner.app, "alice", "s1", "../x", b"", "text/plain")
    assert (refused.value.code, refused.value.details["field"]) == ("validation_error", "name")
    with pytest.raises(ServiceError) as refused:
        services.load_artifact(owner.app, "bob", "s1", "n.txt")
    assert refused.value.code == "not_found"
    assert services.delete_artifact(owner.app, "alice", "s1", "n.txt") == 2
    assert counts() == (0, 0)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("a", True),
        ("report.pdf", True),
        ("user:a", True),
        ("user:user:a", True),
        ("app:a", True),
        ("x" * 256, True),
        ("x" * 257, False),
        ("", False),
        ("user:", False),
        ("user::a", False),
        ("a..b", False),
        ("/etc/passwd", False),
        ("a/b", False),
        ("a\\b", False),
        ("a\x00b", False),
        ("a\nb", False),
        ("a\n", False),
        ("\uff41", False),  # a fullwidth look-alike
        (".a", False),
    ],
)
def test_name_rule(name, valid):
    if valid:
        assert rules.check_name(name) == name
    else:
        with pytest.raises(rules.RuleError):
            rules.check_name(name)


def test_scope_and_mime_rules():
    assert rules.scope_of("user:x") == "user" and rules.scope_of("x") == "session"
    for good in ("image/png", "text/plain; charset=utf-8", 'a/b;x="y z"', "application/vnd.a+json"):
        assert rules.check_mime_type(good) == good
    for bad in ("", "image", "/png", "a/b\n", "a/b; x", 'a/b; x="\n"', "é/b", None, 3):
        with pytest.raises(rules.RuleError):
            rules.check_mime_type(bad)
