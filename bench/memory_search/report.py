"""The "Memory search" section of ``BENCHMARKS.md``: recall tables, latency and HNSW recall
at scale, the LangGraph peer."""

from __future__ import annotations

import statistics

from bench.memory_search.plan import (
    DEPTH,
    DIMENSION,
    EXACT_DEPTH,
    FUSION_DEPTH,
    GROUPS,
    HYBRID_P95_TARGET_MS,
    KS,
    MAX_SCAN_TUPLES,
    RRF_K,
    SWEEP,
    TS_CONFIG,
    VOCABULARY,
    api_ef_search,
)

LABELS = {
    "bm25": "BM25 (bm25s, outside the database)",
    "minilm": "MiniLM dense (cosine, outside the database)",
    "bm25_minilm_rrf": "BM25 + MiniLM, RRF k = 60 (outside the database)",
    "lexical": "lexical (full text, BM25 with the scope's statistics)",
    "vector": "vector (cosine), {model}",
    "hybrid": "hybrid (the embedder's default fusion), {model}",
    "local_vector": "vector (cosine), {local}",
    "local_hybrid": "hybrid (the embedder's default fusion), {local}",
}


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _recall_cells(table: dict, name: str, group: str) -> str:
    return " | ".join(f"{table[name][group][f'@{k}']:.3f}" for k in KS)


def _sweep_rows(table: dict, prefix: str, default: float | None, passing: list) -> list[str]:
    """One row per weight of ``SWEEP``: recall per group, then whether it passes each list
    of ``passing`` (``{group: [weights]}``)."""
    rows = []
    for weight in SWEEP:
        mark = " (default)" if default and weight == default else ""
        cells = " | ".join(
            _recall_cells(table, f"{prefix}hybrid_w{weight:g}", group)
            + "".join(f" | {_met(weight in weights[group])}" for weights in passing)
            for group in GROUPS
        )
        rows.append(f"| {weight:g}{mark} | {cells} |")
    return rows


def _locomo_report(results: dict) -> str:
    table, checks = results["recall"], results["checks"]
    default = results["default_vector_weight"]
    local = results.get("local") or {}
    has_local = "local_hybrid" in table
    names = {
        "model": f"`{results['embedding_model']}`",
        "local": f"`{local.get('embedding_model')}`",
    }
    rows = [
        f"| {LABELS[name].format(**names)} | "
        + " | ".join(_recall_cells(table, name, group) for group in GROUPS)
        + " |"
        for name in LABELS
        if name in table
    ]
    sweep = _sweep_rows(
        table, "", default, [{g: checks[g]["passing_vector_weights"] for g in GROUPS}]
    )
    count = results["questions"]
    conversations = results["conversations"]
    refused = sum(len(c["refused"]) for c in conversations)
    adds = statistics.median(c["adds_per_s"] for c in conversations)
    searches = statistics.median(c["searches_per_s"] for c in conversations)
    targets = []
    for group in GROUPS:
        label = "categories 1-4" if group == "1-4" else f"category {group}"
        found = checks[group]
        targets.append(
            f"| {label}: lexical >= BM25 at every k | {_met(found['lexical_ge_bm25'])} |"
        )
        targets.append(
            f"| {label}: hybrid (default fusion) >= lexical at every k | "
            f"{_met(found['hybrid_ge_lexical'])} |"
        )
        targets.append(
            f"| {label}: vector weights whose hybrid >= lexical at every k | "
            f"{', '.join(f'{w:g}' for w in found['passing_vector_weights']) or 'none'} |"
        )
        if has_local:
            targets.append(
                f"| {label}: hybrid with local (default fusion) >= BM25 + MiniLM RRF at "
                f"every k | {_met(found['local_hybrid_ge_rrf'])} |"
            )
            targets.append(
                f"| {label}: hybrid with local (default fusion) >= lexical at every k | "
                f"{_met(found['local_hybrid_ge_lexical'])} |"
            )
            for key, other in (
                ("local_passing_vector_weights", "lexical"),
                ("local_vector_weights_ge_rrf", "BM25 + MiniLM RRF"),
            ):
                targets.append(
                    f"| {label}: vector weights whose hybrid with local >= {other} at every k | "
                    f"{', '.join(f'{w:g}' for w in found[key]) or 'none'} |"
                )
    default_text = "the embedder's own" if default is None else f"{default:g}"
    if default == 0:
        default_text += " (its vector ranking only fills what the lexical ranking leaves empty)"
    if has_local:
        local_weight = local["default_vector_weight"]
        weight_text = "the embedder's own" if local_weight is None else f"{local_weight:g}"
        local_conversations = local["conversations"]
        local_adds = statistics.median(c["adds_per_s"] for c in local_conversations)
        local_searches = statistics.median(c["searches_per_s"] for c in local_conversations)
        local_refused = sum(len(c["refused"]) for c in local_conversations)
        local_text = f"""The same run against a second service started with
`CTXADMIN_EMBEDDER=local` (its own database): embedder `{local["embedding_model"]}`,
all-MiniLM-L6-v2 in the service's processes, fused by default by weighted score fusion
with vector weight {weight_text} ({local_adds} adds/s, {local_searches} searches/s;
{local_refused} turns refused). Its lexical search is the same as the first service's. Two
baselines use the same model in this process: dense MiniLM (the question's cosine
similarity with every turn of its conversation) and BM25 + MiniLM, reciprocal rank fusion
(k = {RRF_K}, equal weights) of the top {FUSION_DEPTH} of each."""
        passing = [
            {group: checks[group][key] for group in GROUPS}
            for key in ("local_passing_vector_weights", "local_vector_weights_ge_rrf")
        ]
        head = ["w"] + [
            f"{group} {column}"
            for group in GROUPS
            for column in (*(f"@{k}" for k in KS), ">= lexical", ">= RRF")
        ]
        local_sweep = f"""
Hybrid with the local embedder and `weights` `{{"lexical": 1 - w, "vector": w}}` (weighted
score fusion; ">= lexical",
">= RRF": recall at every k at least lexical's, at least BM25 + MiniLM RRF's):

| {" | ".join(head)} |
|{" --- |" * len(head)}
{chr(10).join(_sweep_rows(table, "local_", local_weight, passing))}
"""
    else:
        reason = local.get("skipped", "not run").rstrip(".")
        local_text = f"The local embedder's rows and the MiniLM baselines are skipped: {reason}."
        local_sweep = ""
    return f"""### LoCoMo evidence recall

Each turn of the three LoCoMo dev conversations is one memory of one user, "Speaker: text"
(added through the API, one request each, embedded synchronously: {adds} adds/s, median of
the conversations; {refused} turns refused). Every question with evidence
({count["1-4"]} of categories 1-4, {count["5"]} of category 5) is searched with each mode
(limit {DEPTH}); evidence recall@k is the share of its evidence turns among the top k,
averaged over the questions
({searches} searches/s). Embedder: `{results["embedding_model"]}`, whose default vector
weight in hybrid fusion is {default_text}. BM25 runs on the same turns in this process (`bm25s`:
Lucene scoring, k1 = 1.5, b = 0.75, its English stopwords and the Snowball stemmer; turns
scoring 0 are not retrieved).

{local_text}

| search | 1-4 @5 | 1-4 @10 | 1-4 @25 | 5 @5 | 5 @10 | 5 @25 |
| --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}

Hybrid with `weights` `{{"lexical": 1 - w, "vector": w}}` (weighted score fusion), embedder
`{results["embedding_model"]}` (w = 0 is lexical alone; "passes": recall at every k at least
lexical's):

| w | 1-4 @5 | 1-4 @10 | 1-4 @25 | 1-4 passes | 5 @5 | 5 @10 | 5 @25 | 5 passes |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(sweep)}
{local_sweep}
| target | met |
| --- | --- |
{chr(10).join(targets)}
"""


def _scale_report(results: dict) -> str:
    rows, loads, recalls, efs = [], [], [], []
    largest = max(results["phases"], key=lambda phase: phase["scope_rows"])
    for phase in results["phases"]:
        size = f"{phase['scope_rows']:,}"
        for mode, figures in phase["latency_ms"].items():
            server = figures.get("server") or {"p50": "—", "p95": "—"}
            rows.append(
                f"| {size} | {mode} | {figures['p50']} | {figures['p95']} | "
                f"{server['p50']} | {server['p95']} | {figures['mean_hits']} |"
            )
        load = phase["load"]
        loads.append(
            f"| {load['rows']:,} | {load['table_rows']:,} | {load['generate_embed_copy_s']} | "
            f"{load['insert_s']} | {load['hnsw_build_s']} | {load['analyze_s']} | "
            f"{load['total_s']} | {load['scope_indexes']} | {load['scope_index_build_s']} | "
            f"{load['largest_scope_index_build_s']} |"
        )
        hnsw = phase["hnsw"]
        for kind, label in (("generated", "generated"), ("from_entries", "words of an entry")):
            figures = hnsw[kind]
            similarity = " / ".join(f"{v:.3f}" for v in figures["exact_similarity"].values())
            recalls.append(
                f"| {size} | {label} | {figures['recall_at_10']:.3f} (lowest {figures['min']}) "
                f"| {figures['nearest_found']:.2f} | {figures['similarity_ratio']:.3f} | "
                f"{similarity} | {_met(figures['recall_at_10'] >= 0.95)} |"
            )
        for point in hnsw["ef_search_sweep"]:
            forced = point.get("forced_hnsw")
            forced_cell = (
                "= | ="
                if forced is None
                else f"{forced['recall_at_10']:.3f} | {forced['sql_ms']['p50']}"
            )
            efs.append(
                f"| {size} | {point['ef_search']} | {point['plan']} | "
                f"{point['recall_at_10']:.3f} | "
                f"{point['sql_ms']['p50']} | {point['sql_ms']['p95']} | {forced_cell} |"
            )
    first = results["phases"][0]
    api_efs = " and ".join(
        f"{api_ef_search(phase['scope_rows'])} at {phase['scope_rows']:,} entries"
        for phase in results["phases"]
    )
    return f"""### Search latency at scale

One user's scope, beside {first["other_scopes"]} other scopes of
{first["other_scope_rows"]:,} entries each, loaded directly with `COPY` as the service writes
entries (`memory_search_vector('{TS_CONFIG}', content)`, the hashing embedding computed in Python),
with the shared HNSW index (m = 16, ef_construction = 64) and the loaded scopes' own indexes
dropped during each load and built again after (every scope here holds at least 10,000
entries, so each has its own index: `memory/scope_index.py`, built by `manage.py
scope_indexes` as the beat's maintainer would). Text: 8-60 words drawn from a Zipf
distribution over LoCoMo's vocabulary and a long tail of made-up words ({VOCABULARY:,}
words); queries: 3-8 words of the same. Latency is the client's, through the API (limit 10,
{results["queries"]} distinct queries per mode, after 3 warm-up calls), and the service's
own time for the same searches ("server": the `ms` of its `memory_search` log lines, from
embedding the query to the hits' rows).

| scope entries | mode | p50 ms | p95 ms | server p50 ms | server p95 ms | mean hits |
| --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}

| target | met |
| --- | --- |
| hybrid p95 through the API <= {HYBRID_P95_TARGET_MS} ms at {largest["scope_rows"]:,} entries \
({largest["latency_ms"]["hybrid"]["p95"]} ms) | \
{_met(largest["latency_ms"]["hybrid"]["p95"] <= HYBRID_P95_TARGET_MS)} |

Loads (seconds):

{
        _table_head(
            "rows added",
            "rows after",
            "text, embedding, COPY",
            "tsvector, write",
            "shared HNSW build",
            "VACUUM",
            "total",
            "scope indexes built",
            "their build time",
            "the largest's",
        )
    }
{chr(10).join(loads)}

Each load holds the maintainer's lock (as the beat's maintainer holds it while it builds),
so no scope's index is built from a scope half loaded, and the scope indexes are built
after the load, by `manage.py scope_indexes --wait`.

HNSW recall@10 of the API's vector search against the exact top 10 of the scope (index scans
off; target >= 0.95), for {results["hnsw_queries"]} generated queries and for six consecutive
words of as many of the scope's entries; with the share of queries whose nearest entry is
among the 10, the mean cosine similarity of the 10 as a share of the exact 10's, and the exact
similarity at ranks 1 / 10 / 11 / {EXACT_DEPTH} (how far apart the neighbours are):

| scope entries | queries | recall@10 | nearest found | similarity ratio | exact similarity | met |
| --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(recalls)}

The same vector query in SQL, as the service sends it (over the scope's own index: the
scope as literals, the distance in `halfvec`), with its settings (iterative scan, relaxed
order, up to {MAX_SCAN_TUPLES:,} tuples) but other `hnsw.ef_search` values (the API's for
limit 10: {api_efs}); the plan PostgreSQL chose ("own index", "shared index", or
"exact": the scope's rows sorted by distance), recall@10 against the exact top 10, and the
statement's time; where the planner chose the exact plan, also an index forced
(`enable_sort = off`; "=": the plan was an index already):

| scope entries | ef_search | plan | recall@10 | p50 ms | p95 ms | forced: recall@10 | p50 ms |
| --- | --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(efs)}
{_langgraph_report(results)}"""


def _table_head(*names: str) -> str:
    return f"| {' | '.join(names)} |\n|{' --- |' * len(names)}"


def _langgraph_report(results: dict) -> str:
    """LangGraph's PostgresStore beside ctxadmin's vector search, phase by phase."""
    notes = results.get("langgraph")
    if not notes:
        return ""
    rows, kinds, loads, plans, targets, sweeps = [], [], [], [], [], []
    for phase in results["phases"]:
        size = f"{phase['scope_rows']:,}"
        peer = phase["langgraph"]
        ours, theirs = phase["latency_ms"]["vector"].get("server"), peer["latency_ms"]
        ours_recall = phase["hnsw"]["generated"]["recall_at_10"]
        theirs_recall = peer["recall"]["generated"]["recall_at_10"]
        if ours:
            ratio = " / ".join(f"{theirs[p] / ours[p]:.2f}x" for p in ("p50", "p95"))
            faster = _met(ours["p50"] <= theirs["p50"] and ours["p95"] <= theirs["p95"])
            ours_cell = f"{ours['p50']} / {ours['p95']}"
        else:
            ratio, faster, ours_cell = "—", "—", "—"
        rows.append(
            f"| {size} | {ours_cell} | {ours_recall:.3f} | {theirs['p50']} / {theirs['p95']} | "
            f"{theirs_recall:.3f} | {theirs['mean_hits']} | {ratio} |"
        )
        for kind, label in (("generated", "generated"), ("from_entries", "words of an entry")):
            mine, other = phase["hnsw"][kind], peer["recall"][kind]
            kinds.append(
                f"| {size} | {label} | {mine['recall_at_10']:.3f} | {mine['nearest_found']:.2f} | "
                f"{other['recall_at_10']:.3f} (lowest {other['min']}) | "
                f"{other['nearest_found']:.2f} | {other['mean_hits']} |"
            )
        for point in peer.get("ef_sweep", []):
            sweep_recall = point["recall"]
            sweeps.append(
                f"| {size} | {point['ef_search']} | {sweep_recall['recall_at_10']:.3f} | "
                f"{sweep_recall['mean_hits']} | {point['latency_ms']['p50']} / "
                f"{point['latency_ms']['p95']} |"
            )
        load = peer["load"]
        loads.append(
            f"| {load['rows']:,} | {load['table_rows']:,} | {load['put_s']} | "
            f"{load['puts_per_s']} | {load['index_build_s']} | {load['analyze_s']} | "
            f"{load['total_s']} | {load['embedding_max_abs_diff']:g} |"
        )
        plan = peer["plan"]
        scan = "no HNSW index scan"
        if plan["uses_hnsw"]:
            scan = f"the HNSW index scan gave {plan['index_rows']:g} candidates"
            if plan["namespace_rows"] is not None:
                scan += f", {plan['namespace_rows']:g} of them in the namespace"
        plans.append(
            f"- {size}: {scan} (`hnsw.ef_search` = {plan['settings']['hnsw.ef_search']}, "
            f"`hnsw.iterative_scan` = {plan['settings']['hnsw.iterative_scan']}):\n\n"
            + "\n".join(f"      {line}" for line in plan["search_plan"])
        )
        targets.append(
            f"| {size}: ctxadmin vector search (server-side) at least as fast as LangGraph's "
            f"(in-process), p50 and p95 | {faster} |"
        )
        targets.append(
            f"| {size}: ctxadmin recall@10 higher than LangGraph's | "
            f"{_met(ours_recall > theirs_recall)} |"
        )
    first = results["phases"][0]
    compared_head = _table_head(
        "scope entries",
        "ctxadmin vector, server-side p50 / p95 ms",
        "ctxadmin recall@10",
        "LangGraph in-process p50 / p95 ms",
        "LangGraph recall@10",
        "LangGraph mean hits",
        "ratio LangGraph / ctxadmin (p50 / p95)",
    )
    sweep_head = _table_head(
        "scope entries",
        "ef_search",
        "LangGraph recall@10",
        "LangGraph mean hits",
        "LangGraph in-process p50 / p95 ms",
    )
    kinds_head = _table_head(
        "scope entries",
        "queries",
        "ctxadmin recall@10",
        "ctxadmin nearest found",
        "LangGraph recall@10",
        "LangGraph nearest found",
        "LangGraph mean hits",
    )
    return f"""
### LangGraph's PostgresStore, the same vector searches

LangGraph's long-term memory store (`langgraph-checkpoint-postgres`
{notes["langgraph_checkpoint_postgres"]}, `langgraph-checkpoint` {notes["langgraph_checkpoint"]})
on the same PostgreSQL server, in a database of its own, holding the same entries: one
namespace `("app", user)` per scope ({first["other_scopes"]} others of
{first["other_scope_rows"]:,}), key the entry's id, value `{{"content": text}}`;
`PostgresStore.from_conn_string(url, index={{"dims": {DIMENSION}, "embed": <ctxadmin's hashing
embedder>, "fields": ["content"]}})`, so its default index: HNSW (m = 16, ef_construction =
64), cosine. Entries went in through the store's own `batch` of `PutOp` (which embeds them),
with its index dropped meanwhile and created again after by its own migration, then both of
its tables analyzed. Its searches are `store.search(("app", user), query=q, limit=10)`,
timed in this process (embedding the query, the SQL round trip, decoding the items) for the
same {results["queries"]} queries as ctxadmin's, after 3 warm-up calls; ctxadmin's time is the
service's own for its vector searches above (server-side). Recall@10 is against the exact top
10 of the scope or namespace (index scans off), for the same {results["hnsw_queries"]}
generated queries on both sides.

{compared_head}
{chr(10).join(rows)}

| target | met |
| --- | --- |
{chr(10).join(targets)}

LangGraph's store with larger HNSW candidate lists (`SET hnsw.ef_search` on its connection,
as the store has no setting of its own for it; pgvector's largest is 1,000): its recall@10
for the same generated queries and the hits it returned, and its in-process time for the
same timed queries. Beside ctxadmin's vector search above (server-side, and its SQL at each
`ef_search` in the table before), this is what the store would take to come near the same
recall.

{sweep_head}
{chr(10).join(sweeps)}

Recall@10 by kind of query, with the share of queries whose nearest entry is among the hits,
and the hits LangGraph returned (asked for 10):

{kinds_head}
{chr(10).join(kinds)}

LangGraph's loads (seconds; the last column: the largest difference between a vector it wrote
and ctxadmin's for the same entry, over 200 entries, 0 when the embedding is the same):

| rows added | items after | put | puts/s | HNSW build | ANALYZE | total | vector difference |
| --- | --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(loads)}

The plan PostgreSQL chose for the store's search statement (built by the store; `EXPLAIN
ANALYZE` of the first timed query; its main nodes, without the TTL refresh that follows):

{chr(10).join(plans)}
"""


def report(results: dict) -> str:
    """The section of BENCHMARKS.md."""
    parts = ["## Memory search\n"]
    if "locomo" in results:
        parts.append(_locomo_report(results["locomo"]))
    if "scale" in results:
        parts.append(_scale_report(results["scale"]))
    return "\n".join(parts)
