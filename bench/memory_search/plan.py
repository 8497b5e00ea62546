"""What the memory search section measures (recall depths, the weight sweep, sizes) and the
service's search settings it mirrors (fusion, HNSW ef_search, the maintainer's lock),
which the section speaks in SQL without Django."""

from __future__ import annotations

import math

KS = (5, 10, 25)
DEPTH = max(KS)
SWEEP = (0, 0.1, 0.2, 0.3, 0.5, 0.75)
# What the service's hybrid search fuses (``memory.search``): the top max(50, 3 * limit)
# of each ranking, by reciprocal rank fusion with k = 60.
FUSION_DEPTH = max(50, 3 * DEPTH)
RRF_K = 60
MODES = ("lexical", "vector", "hybrid")
GROUPS = ("1-4", "5")
DIMENSION = 384
TS_CONFIG = "english"
VOCABULARY = 50_000
HNSW_QUERIES = 50
# The service's HNSW settings (``memory.search``): over a scope's own index, its
# ef_search for a limit of 10 is API_EF_SEARCH (CTXADMIN_MEMORY_SCOPE_INDEX_EF_SEARCH's
# default) at 100,000 entries, scaled by the square root below (``api_ef_search``), and an
# iterative scan may visit up to MAX_SCAN_TUPLES tuples.
API_EF_SEARCH = 400
MAX_SCAN_TUPLES = 100_000
SCAN_MEM_MULTIPLIER = 16
EF_SWEEP = (40, 100, 200, 400, 800)
# The scope-index maintainer's advisory lock (``memory.scope_index.LOCK_KEY``).
MAINTAINER_LOCK = 0x6D656D5F73636F70
HYBRID_P95_TARGET_MS = 30
EXACT_DEPTH = 50
CHUNK = 2_000
HNSW_INDEX = (
    "CREATE INDEX memory_embedding_hnsw ON memory_memoryentry "
    "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
)


def memories_url(api, user: str) -> str:
    return f"/api/v1/apps/{api.app}/users/{user}/memories"


def api_ef_search(entries: int) -> int:
    """The service's ef_search for limit 10 over a scope's own index of ``entries``
    (``memory.scope_index.ef_search`` with the default setting)."""
    return max(100, round(API_EF_SEARCH * math.sqrt(min(1.0, entries / 100_000))))
