"""Artifacts through both clients: raw bytes, base64 with metadata, versions, deletion."""

from __future__ import annotations

import hashlib

import pytest
from ctxadmin_client import NotFoundError

pytestmark = pytest.mark.e2e

PNG_ISH = bytes(range(256)) * 3


def test_artifacts_keep_their_bytes_and_versions(client, app, user):
    sid = client.create_session(app.name, user)["session_id"]
    first = client.save_artifact(
        app.name, user, sid, "chart.bin", data=PNG_ISH, mime_type="image/png"
    )
    assert first["version"] == 0 and first["size"] == len(PNG_ISH)
    assert first["sha256"] == hashlib.sha256(PNG_ISH).hexdigest()
    second = client.save_artifact(
        app.name,
        user,
        sid,
        "chart.bin",
        data=b"\x00second\xff",
        mime_type="application/octet-stream",
        custom_metadata={"source": "test"},
    )
    assert second["version"] == 1 and second["custom_metadata"] == {"source": "test"}

    latest = client.load_artifact(app.name, user, sid, "chart.bin")
    assert latest["version"] == 1 and latest["data"] == b"\x00second\xff"
    oldest = client.load_artifact(app.name, user, sid, "chart.bin", version=0)
    assert oldest["data"] == PNG_ISH and oldest["mime_type"] == "image/png"
    assert client.load_artifact_bytes(app.name, user, sid, "chart.bin", version=0) == PNG_ISH

    versions = list(client.list_artifact_versions(app.name, user, sid, "chart.bin", limit=1))
    assert [v["version"] for v in versions] == [0, 1]

    client.save_artifact(
        app.name, user, sid, "user:profile", data=b"{}", mime_type="application/json"
    )
    names = [a["name"] for a in client.list_artifact_names(app.name, user, sid, limit=1)]
    assert sorted(names) == ["chart.bin", "user:profile"]

    attached = client.attach_artifact(app.name, user, sid, "chart.bin", version=0)
    assert attached["version"] == 0 and attached["event_id"]

    assert client.delete_artifact(app.name, user, sid, "chart.bin") is None
    with pytest.raises(NotFoundError):
        client.load_artifact(app.name, user, sid, "chart.bin")
