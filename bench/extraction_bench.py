"""The extraction evaluation (``bench/extraction_suite.py``) as a section of BENCHMARKS.md:
the offline rules extractor, scripted model answers (perfect and hostile) and, when
``CTXADMIN_EVAL_OPENAI_BASE_URL`` and ``CTXADMIN_EVAL_OPENAI_MODEL`` name an
OpenAI-compatible endpoint (a local vLLM, llama.cpp or Ollama server, or a hosted one;
``CTXADMIN_EVAL_OPENAI_API_KEY`` when it needs a key), that model, asked exactly as the
service asks it (``memory.extractors``: system prompt, prompt, schema). Without one the
section says it skipped. In process, no service: ``python -m bench --only extraction``."""

from __future__ import annotations

import json
import os
import time

from bench import extraction_suite as suite
from bench.sections import run_in_process
from ctxadmin.providers import ProviderConnection, ProviderError, complete_json
from memory.extractors import PROMPT_VERSION, SYSTEM, answer_schema, build_prompt
from memory.rule_extractor import VERSION as RULES_VERSION

SECTION = "## Extraction: what extractors propose, decided by the server"


def _endpoint() -> tuple[ProviderConnection, str] | None:
    base_url = os.environ.get("CTXADMIN_EVAL_OPENAI_BASE_URL", "").strip()
    model = os.environ.get("CTXADMIN_EVAL_OPENAI_MODEL", "").strip()
    if not base_url or not model:
        return None
    connection = ProviderConnection(
        name="eval",
        kind="openai_compatible",
        base_url=base_url,
        api_key=os.environ.get("CTXADMIN_EVAL_OPENAI_API_KEY") or None,
    )
    return connection, model


def _model_extractor(connection: ProviderConnection, model: str, usage: dict):
    def extract(turns, candidates, _conv):
        try:
            completion = complete_json(
                connection,
                model=model,
                system=SYSTEM,
                prompt=build_prompt(turns, candidates),
                schema=answer_schema(),
                deadline=time.monotonic() + 120,
                max_output_tokens=2048,
                temperature=0.0,
            )
        except ProviderError as exc:
            usage["errors"] = usage.get("errors", 0) + 1
            return f"provider error {exc.code}"
        usage["input_tokens"] = usage.get("input_tokens", 0) + (completion.input_tokens or 0)
        usage["output_tokens"] = usage.get("output_tokens", 0) + (completion.output_tokens or 0)
        try:
            return json.loads(completion.text)
        except ValueError:
            return completion.text  # refused by the check, as the service refuses it

    return extract


def measure() -> dict:
    conversations = suite.conversations()
    results = {
        "conversations": len(conversations),
        "sessions": sum(len(c.sessions) for c in conversations),
        "events": sum(len(s.turns) for c in conversations for s in c.sessions),
        "rules": suite.evaluate(suite.rules, conversations),
        "perfect": suite.evaluate(suite.scripted(suite.gold_answers(conversations)), conversations),
        "hostile": suite.evaluate(
            suite.scripted(suite.hostile_answers(conversations)), conversations
        ),
        "model": None,
    }
    endpoint = _endpoint()
    if endpoint is not None:
        connection, model = endpoint
        usage: dict = {}
        started = time.perf_counter()
        score = suite.evaluate(_model_extractor(connection, model, usage), conversations)
        results["model"] = {
            "model": model,
            "score": score,
            "usage": usage,
            "seconds": round(time.perf_counter() - started, 1),
        }
    return results


def _row(name: str, score: suite.Score) -> str:
    f = score.figures()
    return (
        f"| {name} | {f['operations_gold']} | {f['operations_predicted']} | {f['precision']} | "
        f"{f['recall']} | {f['wrong_retirements']} | {f['duplicates']} | {f['mixed']} | "
        f"{f['refused_answers']} |"
    )


_HEADER = (
    "| extractor | gold ops | predicted | precision | recall | wrong retirements | duplicates "
    "| mixed | refused |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def report(results: dict, stamp: str) -> str:
    rows = [
        _row(f"rules (`{RULES_VERSION}`, offline)", results["rules"]),
        _row("scripted: the gold's own answers", results["perfect"]),
        _row("scripted: malformed, truncated and hostile answers", results["hostile"]),
    ]
    model = results["model"]
    if model is not None:
        rows.append(_row(f"`{model['model']}` (`{PROMPT_VERSION}`)", model["score"]))
        usage = model["usage"]
        sessions = results["sessions"]
        spent = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
        per_thousand = round(spent * 1000 / results["events"])
        model_line = (
            f"The model's run: {usage.get('input_tokens', 0):,} input and "
            f"{usage.get('output_tokens', 0):,} output tokens over {sessions} sessions "
            f"({per_thousand:,} tokens per 1,000 events; {usage.get('errors', 0)} provider "
            f"errors), {model['seconds']} s."
        )
    else:
        model_line = (
            "No OpenAI-compatible endpoint was named (`CTXADMIN_EVAL_OPENAI_BASE_URL`, "
            "`CTXADMIN_EVAL_OPENAI_MODEL`): the model run was skipped."
        )
    categories = results["rules"].by_category
    per_category = "\n".join(
        f"| {name} | {s.figures()['operations_gold']} | {s.figures()['precision']} | "
        f"{s.figures()['recall']} | {s.wrong_retirements} |"
        for name, s in categories.items()
    )
    return f"""{SECTION}

{stamp}

{results["conversations"]} scripted conversations ({results["sessions"]} sessions) with gold
operations, each session's answer checked whole by the service's own check
(`memory/proposals.py`) over an in-memory scope and applied as the service applies it
(`bench/extraction_suite.py` states the categories and the scoring). Precision and recall
of operations; wrong retirements (an update or retire that no gold operation asks for);
duplicates (live memories of a scope with the same normalised text, or near-duplicates);
mixed (another user's fact in a scope); refused (answers the check refused whole, which
change nothing).

{_HEADER}
{chr(10).join(rows)}

{model_line}

The rules extractor by category. Its figures are on sentences in the shapes its rules read
(the suite and the rules were written side by side); what it cannot read shows in
`beyond_rules` (a relative's facts, pets, facts stated in passing) and in the one quote it
takes for a fact (`not_a_fact`: "My friend always says: I live in a yellow submarine").
A model extractor is there for those.

| category | gold ops | precision | recall | wrong retirements |
| --- | --- | --- | --- | --- |
{per_category}
"""


def run_section(command: str = "python -m bench --only extraction") -> dict:
    return run_in_process(command, SECTION, measure, report)


if __name__ == "__main__":
    run_section()
