"""Large scopes' own vector indexes (``memory/scope_index.py``): built for the scopes over
the threshold only, used by their searches and by nobody else's, dropped when the scope is
erased, shrinks or changes embedding model, and cleaned up after a build that died."""

from __future__ import annotations

import io
import json
import threading
from datetime import timedelta

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from memory import scope_index
from memory.models import MemoryEntry, ScopeIndex
from tests.conftest import database_url_for_current_connection, make_tenant

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = "garden tomato basil harbour sailing violin bakery museum glacier lantern".split()


def url(user: str, app: str = "acme") -> str:
    return f"/api/v1/apps/{app}/users/{user}/memories"


def fill(client, user: str, count: int, app: str = "acme", start: int = 0) -> list[str]:
    ids = []
    for i in range(start, start + count):
        text = f"{WORDS[i % 10]} {WORDS[(i * 3 + 1) % 10]} {WORDS[(i * 7 + 2) % 10]} note {i}"
        result = client.post(url(user, app), {"content": text}, format="json")
        assert result.status_code == 201, result.content
        ids.append(result.json()["id"])
    return ids


def vector_search(client, user: str, query: str, limit: int = 10, **body) -> list[dict]:
    """The scope's nearest ``limit`` entries, without the relevance floor (these tests are
    about which index finds them)."""
    result = client.post(
        f"{url(user)}/search",
        {"query": query, "mode": "vector", "limit": limit, "min_score": -1, **body},
        format="json",
    )
    assert result.status_code == 200, result.content
    return result.json()["hits"]


def indexes() -> dict[str, str]:
    """This family's indexes: name → definition."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE tablename = 'memory_memoryentry' AND starts_with(indexname, %s)",
            [scope_index.INDEX_PREFIX],
        )
        return dict(cursor.fetchall())


def exact_scores(user: str, query: str, limit: int = 10) -> list[float]:
    """The scores of the scope's exact top ``limit`` (texts here share words, so several
    entries may tie: the scores, not the ids, say whether a ranking is the exact one)."""
    from memory.embedders import HashingEmbedder
    from memory.vectors import vector_text

    vector = vector_text(HashingEmbedder(384).vector(query))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 - (embedding <=> %s::vector) FROM memory_memoryentry WHERE user_id = %s "
            "ORDER BY (embedding <=> %s::vector) + 0 LIMIT %s",
            [vector, user, vector, limit],
        )
        return [round(row[0], 6) for row in cursor.fetchall()]


@pytest.fixture(autouse=True)
def no_index_left_behind():
    """The test database is emptied after each test, its indexes are not: drop the
    family's."""
    yield
    with connection.cursor() as cursor:
        for name in indexes():
            cursor.execute(f"DROP INDEX IF EXISTS {name}")


@pytest.fixture
def small_threshold(settings):
    settings.CTXADMIN_MEMORY_SCOPE_INDEX_MIN_ENTRIES = 30
    return settings


@pytest.fixture
def tenant():
    return make_tenant("acme")


def test_only_a_scope_over_the_threshold_gets_an_index_and_its_search_uses_it(
    small_threshold, tenant
):
    api = tenant.client()
    user = "a.b:c@d-e"  # every character an id may hold, quoted into the predicate
    fill(api, user, 40)
    fill(api, "bob", 20)

    result = scope_index.maintain(max_builds=5)

    assert result == {"locked": True, "dropped": 0, "built": 1, "failed": 0, "more": False}
    row = ScopeIndex.objects.get()
    assert (row.user_id, row.state, row.entries) == (user, "ready", 40)
    assert row.embedding_model == "hashing-v2-384" and row.build_seconds is not None
    definition = indexes()[row.index_name]
    assert "hnsw" in definition and "halfvec_cosine_ops" in definition
    assert f"user_id)::text = '{user}'" in definition
    assert f"app_id = {tenant.app.pk}" in definition

    # The search statement is one the partial index can serve (the planner takes it once
    # other plans are ruled out, as it does for a scope of this size on its own).
    from memory.vectors import vector_text

    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL enable_seqscan = off")
        predicate = scope_index.scope_predicate(tenant.app.pk, user, row.embedding_model)
        statement = (
            f"EXPLAIN SELECT id FROM memory_memoryentry WHERE {predicate} "  # noqa: S608
            "ORDER BY embedding::halfvec(384) <=> %s::halfvec(384) LIMIT 10"
        )
        cursor.execute(statement, [vector_text([1.0] + [0.0] * 383)])
        plan = str(cursor.fetchall())
        cursor.execute("ROLLBACK")
    assert row.index_name in plan

    for query in ("garden basil", "violin museum lantern", "sailing"):
        hits = vector_search(api, user, query)
        assert [round(hit["score"], 6) for hit in hits] == exact_scores(user, query)
    # Bob's scope has no index: its search is exact, and shows only bob's entries.
    bob = vector_search(api, "bob", "garden basil", limit=100)
    assert len(bob) == 20
    assert set(
        MemoryEntry.objects.filter(id__in=[h["id"] for h in bob]).values_list("user_id", flat=True)
    ) == {"bob"}


def test_entries_added_after_the_build_are_found_through_the_index(small_threshold, tenant):
    api = tenant.client()
    fill(api, "alice", 30)
    assert scope_index.maintain()["built"] == 1
    later = fill(api, "alice", 5, start=30)
    hits = vector_search(api, "alice", "note", limit=100)
    assert len(hits) == 35 and set(later) <= {hit["id"] for hit in hits}


def test_another_apps_same_user_is_another_scope(small_threshold, tenant):
    other = make_tenant("globex")
    fill(tenant.client(), "alice", 30)
    theirs = set(fill(other.client(), "alice", 3, app="globex"))
    scope_index.maintain()
    assert ScopeIndex.objects.get().app_id == tenant.app.pk
    hits = (
        other.client()
        .post(
            url("alice", "globex") + "/search",
            {"query": "garden", "mode": "vector", "limit": 100, "filter": {"user_id": "alice"}},
            format="json",
        )
        .json()["hits"]
    )
    assert {hit["id"] for hit in hits} <= theirs


def test_erasing_the_scope_drops_its_index(small_threshold, tenant):
    api = tenant.client()
    fill(api, "alice", 30)
    scope_index.maintain()
    name = ScopeIndex.objects.get().index_name
    erased = api.delete(url("alice"), {"confirm": "erase user alice"}, format="json")
    assert erased.status_code == 200, erased.content

    assert scope_index.maintain()["dropped"] == 1
    assert not ScopeIndex.objects.exists() and name not in indexes()
    assert vector_search(api, "alice", "garden") == []


def test_a_scope_is_dropped_below_half_the_threshold_not_before(small_threshold, tenant):
    api = tenant.client()
    ids = fill(api, "alice", 30)
    scope_index.maintain()
    for memory_id in ids[:15]:  # 15 left: half the threshold, kept
        assert api.delete(f"{url('alice')}/{memory_id}").status_code == 204
    assert scope_index.maintain()["dropped"] == 0
    assert api.delete(f"{url('alice')}/{ids[15]}").status_code == 204
    assert scope_index.maintain()["dropped"] == 1
    assert indexes() == {}


def test_an_index_of_another_embedding_model_is_replaced(small_threshold, tenant):
    fill(tenant.client(), "alice", 30)
    scope_index.maintain()
    old = ScopeIndex.objects.get()
    ScopeIndex.objects.filter(pk=old.pk).update(embedding_model="hashing-v1-384")

    assert scope_index.maintain() == {
        "locked": True,
        "dropped": 1,
        "built": 1,
        "failed": 0,
        "more": False,
    }
    new = ScopeIndex.objects.get()
    assert new.pk != old.pk and new.embedding_model == "hashing-v2-384"
    assert list(indexes()) == [new.index_name]


def test_the_largest_scopes_get_the_indexes_there_is_room_for(small_threshold, tenant):
    small_threshold.CTXADMIN_MEMORY_SCOPE_INDEXES_MAX = 1
    api = tenant.client()
    fill(api, "alice", 30)
    fill(api, "bob", 35)
    assert scope_index.maintain(max_builds=5)["built"] == 1
    assert ScopeIndex.objects.get().user_id == "bob"

    small_threshold.CTXADMIN_MEMORY_SCOPE_INDEXES_MAX = 0  # none: every index goes
    assert scope_index.maintain()["dropped"] == 1
    assert indexes() == {} and not ScopeIndex.objects.exists()
    assert len(vector_search(api, "bob", "garden", limit=100)) == 35


def test_leftovers_of_a_build_that_died_are_dropped(small_threshold, tenant):
    fill(tenant.client(), "alice", 30)
    # A row left building, and an index of the family without a row.
    dead = ScopeIndex.objects.create(
        app=tenant.app, user_id="alice", embedding_model="hashing-v2-384", entries=30
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE INDEX {dead.index_name} ON memory_memoryentry (id) WHERE user_id = 'alice'"
        )
        cursor.execute("CREATE INDEX memory_scope_vec_999999 ON memory_memoryentry (id)")
        cursor.execute("CREATE INDEX memory_scope_vec_extra ON memory_memoryentry (id)")
        # Not of the family (an underscore is no wildcard here): left alone.
        cursor.execute("CREATE INDEX memoryXscopeXvecX1 ON memory_memoryentry (id)")

    result = scope_index.maintain()

    assert (result["dropped"], result["built"]) == (3, 1)
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX memoryxscopexvecx1")
    row = ScopeIndex.objects.get()
    assert row.pk != dead.pk and row.state == "ready"
    assert list(indexes()) == [row.index_name]


def test_a_failed_build_leaves_no_index_and_is_tried_again_an_hour_later(
    small_threshold, tenant, monkeypatch
):
    fill(tenant.client(), "alice", 30)
    monkeypatch.setattr(scope_index, "M", 1000)  # pgvector refuses m above 100

    result = scope_index.maintain()

    assert (result["built"], result["failed"], result["more"]) == (0, 1, False)
    failed = ScopeIndex.objects.get()
    assert failed.state == "failed" and failed.failed_at is not None
    assert failed.error == "22023"  # invalid_parameter_value: it would fail again at once
    assert failed.retry_at == failed.failed_at + timedelta(seconds=scope_index.RETRY_SECONDS)
    assert indexes() == {}
    # Not tried again at once (a build that fails would fail at every run of the beat)...
    assert scope_index.maintain() == {
        "locked": True,
        "dropped": 0,
        "built": 0,
        "failed": 0,
        "more": False,
    }
    assert vector_search(tenant.client(), "alice", "garden", limit=100)  # exact meanwhile
    # ...but once the hour has passed.
    monkeypatch.setattr(scope_index, "M", 32)
    ScopeIndex.objects.filter(pk=failed.pk).update(
        retry_at=failed.retry_at - timedelta(seconds=scope_index.RETRY_SECONDS + 1)
    )
    assert scope_index.maintain()["built"] == 1
    assert ScopeIndex.objects.get().state == "ready"


def test_a_build_that_failed_for_a_reason_of_the_moment_is_tried_again_at_the_next_run(
    small_threshold, tenant
):
    """A lock the build could not get (here: another session's lock on the table, with a
    lock timeout) is a failure of the moment, as a deadlock with other DDL is: the scope is
    tried again at the next run, not an hour later."""
    fill(tenant.client(), "alice", 30)
    with psycopg.connect(database_url_for_current_connection()) as other:
        other.execute("LOCK TABLE memory_memoryentry IN SHARE ROW EXCLUSIVE MODE")
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        try:
            result = scope_index.maintain()
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        other.rollback()

    assert (result["built"], result["failed"]) == (0, 1)
    failed = ScopeIndex.objects.get()
    assert (failed.state, failed.error) == ("failed", "55P03")  # lock_not_available
    assert failed.retry_at == failed.failed_at
    assert indexes() == {}
    assert scope_index.maintain()["built"] == 1
    assert ScopeIndex.objects.get().state == "ready"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (psycopg.errors.DeadlockDetected, ("40P01", 0)),
        (psycopg.errors.SerializationFailure, ("40001", 0)),
        (psycopg.errors.AdminShutdown, ("57P01", 0)),
        (psycopg.OperationalError, ("OperationalError", 0)),  # the connection was lost
        (psycopg.errors.QueryCanceled, ("57014", scope_index.RETRY_SECONDS)),  # time limit
        (psycopg.errors.OutOfMemory, ("53200", scope_index.RETRY_SECONDS)),
        (psycopg.errors.DiskFull, ("53100", scope_index.RETRY_SECONDS)),
    ],
)
def test_what_a_failure_costs_the_scope(error, expected):
    """Django's error wraps the driver's, whose SQLSTATE tells a failure of the moment from
    one that would happen again."""
    from django.db import OperationalError

    try:
        try:
            raise error("a message that is never kept")
        except psycopg.Error as cause:
            raise OperationalError(str(cause)) from cause
    except OperationalError as wrapped:
        assert scope_index.failure(wrapped) == expected
    assert scope_index.failure(ValueError("not a database error")) == (
        "ValueError",
        scope_index.RETRY_SECONDS,
    )


def test_one_maintainer_at_a_time(small_threshold, tenant):
    fill(tenant.client(), "alice", 30)
    with psycopg.connect(database_url_for_current_connection(), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [scope_index.LOCK_KEY])
        assert scope_index.maintain() == {"locked": False}
        assert not ScopeIndex.objects.exists()
        with pytest.raises(CommandError, match="another maintainer"):
            call_command("scope_indexes", stdout=io.StringIO())
        # --wait: waits for the other maintainer, then builds.
        out = io.StringIO()

        def wait_and_build():
            try:
                call_command("scope_indexes", "--wait", stdout=out)
            finally:
                connections.close_all()

        waiting = threading.Thread(target=wait_and_build, daemon=True)
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and not ScopeIndex.objects.exists()
        other.execute("SELECT pg_advisory_unlock(%s)", [scope_index.LOCK_KEY])
        waiting.join(60)
    assert json.loads(out.getvalue())["built"] == 1


def test_maintain_refuses_to_run_inside_a_transaction(small_threshold, tenant):
    from django.db import transaction

    with transaction.atomic(), pytest.raises(RuntimeError):
        scope_index.maintain()


def test_the_management_command_builds_now_and_reports(small_threshold, tenant):
    fill(tenant.client(), "alice", 30)
    out = io.StringIO()
    call_command("scope_indexes", stdout=out)
    report = json.loads(out.getvalue())
    row = ScopeIndex.objects.get()
    assert (report["built"], report["dropped"]) == (1, 0)
    assert report["indexes"] == [
        {
            "index": row.index_name,
            "app": tenant.app.pk,
            "state": "ready",
            "entries": 30,
            "build_seconds": row.build_seconds,
        }
    ]
    assert "alice" not in out.getvalue()  # ids and counts only


@pytest.mark.parametrize(
    ("entries", "depth", "expected"),
    [
        (100_000, 10, 400),  # the setting, at 100,000 entries
        (400_000, 10, 400),
        (10_000, 10, 126),  # 400 * sqrt(0.1)
        (1_000, 10, 100),  # never below 100
        (0, 10, 100),
        (10_000, 80, 160),  # twice the depth
        (100_000, 600, 1000),  # at most 1,000
    ],
)
def test_the_candidate_list_scales_with_the_scope(settings, entries, depth, expected):
    settings.CTXADMIN_MEMORY_SCOPE_INDEX_EF_SEARCH = 400
    assert scope_index.ef_search(entries, depth) == expected


@pytest.mark.parametrize("path", ["exact", "shared index", "own index"])
def test_a_vector_searchs_scan_settings_end_with_its_statement(
    small_threshold, tenant, monkeypatch, path
):
    """A vector search's scan settings (index scans off for an exact search, the HNSW
    candidate list and iterative scan for an index scan) go with its statement in one round
    trip, and the search count with the hits in another; the settings end with the
    statement: after it, outside a transaction and inside a caller's, the connection's
    settings are what they were. The ranking is the exact one."""
    from django.db import transaction

    from memory import inputs
    from memory import search as memory_search

    api = tenant.client()
    fill(api, "alice", 40)
    if path == "own index":
        assert scope_index.maintain(max_builds=1)["built"] == 1
    if path == "shared index":
        monkeypatch.setattr(memory_search, "EXACT_SEARCH_MAX", 0)
    request = inputs.parse_search({"query": "garden basil", "mode": "vector"})
    names = ("enable_indexscan", "hnsw.ef_search", "hnsw.iterative_scan")

    def current() -> tuple:
        with connection.cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(["current_setting(%s)"] * len(names)), names)
            return cursor.fetchone()

    memory_search.search(tenant.app, "alice", request)  # loads pgvector's settings
    before = current()
    assert before == ("on", "40", "off")

    with CaptureQueriesContext(connection) as captured:
        outside = memory_search.search(tenant.app, "alice", request)
    assert current() == before
    # The policy; the scope's plan; the settings with the search; the count with the hits.
    statements = [query["sql"] for query in captured.captured_queries]
    assert len(statements) == 4, statements
    assert "set_config" in statements[2] and "ORDER BY" in statements[2]
    assert "memory_searchcount" in statements[3] and "memory_memoryentry" in statements[3]
    with transaction.atomic():
        inside = memory_search.search(tenant.app, "alice", request)
        assert current() == before
    assert current() == before
    assert [hit["id"] for hit in inside] == [hit["id"] for hit in outside]
    assert [round(hit["score"], 6) for hit in outside] == exact_scores("alice", "garden basil")


def test_the_benchmark_holds_the_maintainers_lock_and_knows_the_candidate_lists(settings):
    """The memory benchmark speaks SQL without Django: its copies of the maintainer's lock
    key and of the service's ef_search rule are the service's."""
    from bench.memory_search import plan as memory_bench

    assert memory_bench.MAINTAINER_LOCK == scope_index.LOCK_KEY
    assert settings.CTXADMIN_MEMORY_SCOPE_INDEX_EF_SEARCH == memory_bench.API_EF_SEARCH
    for entries in (10_000, 25_000, 60_000, 100_000, 250_000):
        assert memory_bench.api_ef_search(entries) == scope_index.ef_search(entries, 10)
