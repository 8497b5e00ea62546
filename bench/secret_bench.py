"""What the secret detectors cost, in process: the credential-text detector per KiB of
conversation text, key-name pruning per key and per event, memory add's parsing and outbox
sanitising per item, each beside the detector it replaced (kept here as the baseline).

``make bench`` runs it after its service sections; alone, ``python -m bench.secret_bench``
(about 20 s, no service) rewrites the "Secret detection" section of ``bench/BENCHMARKS.md``.

The corpus is the session benchmark's conversation (``bench.workload``): user and model text
of 200-600 bytes and the JSON of function calls and responses; the same texts with a
credential in one of five; and German, French and Japanese sentences (the detector's
normalising path). Figures are the best of several rounds (a shared 2-core machine).
"""

from __future__ import annotations

import json
import os
import random
import re
import string
import time
from datetime import UTC, datetime
from functools import lru_cache

import django

from bench.sections import run_in_process
from bench.workload import conversation
from ctxadmin import credentials, pruning
from ctxadmin.pruning import is_secret_key, looks_like_secret, prune_secrets, redact_secret_text

SECTION = "## Secret detection"
ROUNDS = 7

# ----------------------------------------------------------------------------- the baseline

# The detectors as they were before the curated set (ctxadmin.pruning of 2026-12-01).
_OLD_TEXT = re.compile(
    r"(?i)(?:\b(?:api[-_ ]?key|access[-_ ]?token|refresh[-_ ]?token|client[-_ ]?secret"
    r"|secret[-_ ]?key|password|passwd|pwd|token)\s*[:=]\s*\S{4,})"
    r"|(?:\bbearer\s+[A-Za-z0-9._~+/=-]{12,})"
    r"|(?:-----BEGIN (?:[A-Z ]+ )?PRIVATE KEY-----)"
    r"|(?:\b(?:AKIA|ASIA)[A-Z0-9]{16}\b)"
    r"|(?:\b(?:sk|pk|rk)-[A-Za-z0-9_-]{20,})"
    r"|(?:\bgh[pousr]_[A-Za-z0-9]{30,})"
    r"|(?:\bAIza[0-9A-Za-z_-]{30,})"
)
_OLD_NAMES = (
    "apikey accesstoken refreshtoken idtoken authtoken bearertoken sessiontoken authorization"
    " clientsecret password passwd secret privatekey cookie".split()
)
_OLD_SEPARATORS = re.compile(r"[-_.\s]")


def old_looks_like_secret(text: str) -> bool:
    return _OLD_TEXT.search(text) is not None


def old_redact(text: str) -> str:
    return _OLD_TEXT.sub("[redacted]", text)


def old_is_secret_key(name: str) -> bool:
    normalised = _OLD_SEPARATORS.sub("", name).lower()
    return any(normalised.endswith(secret) for secret in _OLD_NAMES)


old_is_secret_key_cached = lru_cache(maxsize=8192)(old_is_secret_key)


# ----------------------------------------------------------------------------- the corpus


def _fake(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def corpus(seed: int = 7) -> dict:
    rng = random.Random(seed)  # noqa: S311 - a reproducible corpus, not a secret
    alnum = string.ascii_letters + string.digits
    events = list(conversation(rng, 600, "secret-bench"))
    texts, payloads = [], []
    for event in events:
        for part in event["content"]["parts"]:
            if "text" in part:
                texts.append(part["text"])
            else:
                payloads.append(json.dumps(part, separators=(",", ":")))
    credentials = [
        lambda: '{"api_key": "' + _fake(rng, alnum, 32) + '"}',
        lambda: "sk_" + "live_" + _fake(rng, alnum, 24),
        lambda: "Authorization: Bearer " + _fake(rng, alnum, 40),
        lambda: "postgres://app:" + _fake(rng, alnum, 12) + "@db:5432/app",
        lambda: "my password is " + _fake(rng, alnum, 10),
        lambda: "ghp_" + _fake(rng, alnum, 36),
    ]
    with_credentials = [
        f"{text[: len(text) // 2]} {rng.choice(credentials)()} {text[len(text) // 2 :]}"
        if index % 5 == 0
        else text
        for index, text in enumerate(texts)
    ]
    foreign = [
        "Der Reisende fragt, ob der Flug nach München am Donnerstag um 9:40 Uhr gebucht ist. ",
        "Le passager préfère une place côté couloir pour le vol de jeudi à Lyon. ",
        "木曜日のリスボン行きの便を変更できますか。通路側の席を希望します。",
    ]
    non_ascii = ["".join(rng.choice(foreign) for _ in range(5)) for _ in range(200)]
    keys = sorted({key for event in events for key in _keys(event)})
    return {
        "events": events,
        "texts": texts,
        "payloads": payloads,
        "with_credentials": with_credentials,
        "non_ascii": non_ascii,
        "keys": keys,
    }


def _keys(value):
    if isinstance(value, dict):
        for key, child in value.items():
            yield key
            yield from _keys(child)
    elif isinstance(value, list):
        for child in value:
            yield from _keys(child)


# ----------------------------------------------------------------------------- measuring


def best_seconds(call, rounds: int = ROUNDS) -> float:
    call()  # warm caches and compiled patterns
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def per_kib(detector, texts: list[str]) -> float:
    kib = sum(len(text.encode("utf-8")) for text in texts) / 1024

    def run():
        for text in texts:
            detector(text)

    return round(best_seconds(run) / kib * 1e6, 1)


def per_item(call, items: list, rounds: int = ROUNDS) -> float:
    def run():
        for item in items:
            call(item)

    return round(best_seconds(run, rounds) / len(items) * 1e6, 2)


def _django():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()


def measure() -> dict:
    _django()
    # After django.setup(): these modules import the memory app's models.
    from memory import entries, new_memory
    from memory.outbox import sanitise

    data = corpus()
    found = sum(map(looks_like_secret, data["with_credentials"]))
    old_found = sum(map(old_looks_like_secret, data["with_credentials"]))
    results: dict = {
        "corpus": {
            "texts": len(data["texts"]),
            "kib": round(sum(len(t.encode()) for t in data["texts"]) / 1024, 1),
            "payloads": len(data["payloads"]),
            "with_credentials": sum(
                a != b for a, b in zip(data["with_credentials"], data["texts"], strict=True)
            ),
            "found_new": found,
            "found_old": old_found,
            "false_positives_new": sum(map(looks_like_secret, data["texts"] + data["payloads"])),
            "keys": len(data["keys"]),
        },
        "text": {},
    }
    for name, texts in (
        ("conversation text", data["texts"]),
        ("function call and response JSON", data["payloads"]),
        ("text with a credential in one of five", data["with_credentials"]),
        ("German, French and Japanese text", data["non_ascii"]),
    ):
        results["text"][name] = {
            "old": per_kib(old_looks_like_secret, texts),
            "new": per_kib(looks_like_secret, texts),
        }
    flagged = [t for t in data["with_credentials"] if looks_like_secret(t)]
    results["redact"] = {
        "old": per_kib(old_redact, flagged),
        "new": per_kib(redact_secret_text, flagged),
    }
    keys = data["keys"] * 20
    uncached = is_secret_key.__wrapped__
    results["keys"] = {
        "uncached": {"old": per_item(old_is_secret_key, keys), "new": per_item(uncached, keys)},
        "cached": {
            "old": per_item(old_is_secret_key_cached, keys),
            "new": per_item(is_secret_key, keys),
        },
    }
    events = data["events"]
    results["prune_event"] = _swapped(
        pruning, "is_secret_key", lambda: per_item(prune_secrets, events)
    )
    memory_bodies = {
        "300 B": [{"content": t[:300]} for t in data["texts"][:300]],
        "4 KiB": [{"content": " ".join(data["texts"][i : i + 12])[:4096]} for i in range(200)],
    }
    results["memory_add"] = {}
    for name, bodies in memory_bodies.items():
        results["memory_add"][name] = _swapped(
            entries,
            "looks_like_secret",
            lambda bodies=bodies: per_item(new_memory.parse_new_memory, bodies),
        )
    rows = [
        {
            "event_id": f"e{n}",
            "seq": n,
            "author": "user",
            "role": "user",
            "partial": False,
            "content": {"role": "user", "parts": [{"text": text}]},
            "timestamp": datetime(2026, 12, 1, tzinfo=UTC),
        }
        for n, text in enumerate(data["with_credentials"])
    ]
    results["outbox_sanitise"] = _swapped(
        sanitise,
        ("looks_like_secret", "redact_secret_text"),
        lambda: per_item(sanitise.sanitise, rows),
    )
    results["detectors"] = len(credentials.DETECTORS)
    results["worst"] = worst_case(looks_like_secret, redact_secret_text)
    return results


# Fragments that a backtracking pattern could make quadratic when repeated without a space.
WORST_FRAGMENTS = (
    "eyJ",
    "cookie:",
    "password=",
    "--",
    "<",
    "sk-",
    "AIza",
    "://",
    "token:",
    "Basic ",
    "key=",
    "github_pat_",
    "-----BEGIN ",
    "my password is ",
    "\u200b",
    "\uff50",
    "pass\u200b",
    "pass=",
    "curl ",
    "mysql ",
    "sshpass ",
    "docker login ",
    "-----END ",
    "\\n",
    '\\"',
    "ewo",
    "パスワード",
    "mot de passe ",
)


def worst_case(*detectors, size: int = 256 * 1024) -> dict:
    """The slowest µs per KiB over 256 KiB of each fragment repeated, and its fragment."""
    slowest = {"us_per_kib": 0.0, "fragment": ""}
    for fragment in WORST_FRAGMENTS:
        text = (fragment * (size // len(fragment) + 1))[:size]
        kib = len(text.encode("utf-8")) / 1024
        for detector in detectors:
            seconds = best_seconds(lambda text=text, detector=detector: detector(text), rounds=2)
            if seconds / kib * 1e6 > slowest["us_per_kib"]:
                slowest = {"us_per_kib": round(seconds / kib * 1e6, 1), "fragment": fragment}
    return slowest


def _swapped(module, names, measure_it) -> dict:
    """``measure_it()`` with ``module``'s detector functions, then with the old ones."""
    names = (names,) if isinstance(names, str) else names
    olds = {
        "looks_like_secret": old_looks_like_secret,
        "redact_secret_text": old_redact,
        "is_secret_key": old_is_secret_key_cached,
    }
    saved = {name: getattr(module, name) for name in names}
    new = measure_it()
    try:
        for name in names:
            setattr(module, name, olds[name])
        old = measure_it()
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
    return {"old": old, "new": new}


# ----------------------------------------------------------------------------- the report


def _row(label: str, figures: dict) -> str:
    old, new = figures["old"], figures["new"]
    return f"| {label} | {old} | {new} | {round(new / old, 2)}x |"


def report(results: dict, stamp: str) -> str:
    c = results["corpus"]
    rows = [_row(f"{name} (µs per KiB)", v) for name, v in results["text"].items()]
    rows += [
        _row("`redact_secret_text`, texts holding a credential (µs per KiB)", results["redact"]),
        _row(
            f"`is_secret_key`, not cached (µs per key, the {c['keys']} keys of the conversation)",
            results["keys"]["uncached"],
        ),
        _row(
            "`is_secret_key`, cached as at every append and build (µs per key)",
            results["keys"]["cached"],
        ),
        _row("`prune_secrets` of an event, keys cached (µs per event)", results["prune_event"]),
        *(
            _row(f"memory add: `parse_new_memory`, {name} of content (µs per body)", v)
            for name, v in results["memory_add"].items()
        ),
        _row(
            "outbox `sanitise` of an event, a credential in one of five (µs per event)",
            results["outbox_sanitise"],
        ),
    ]
    table = "\n".join(rows)
    worst = results["worst"]
    return f"""{SECTION}

{stamp}

`looks_like_secret` and `redact_secret_text` (`ctxadmin/credentials.py`: {results["detectors"]}
patterns, each tried only when its anchor literal is in the text) and `is_secret_key` /
`prune_secrets` (`ctxadmin/pruning.py`), in process, beside the detectors they replaced
(the single regular expression and the suffix match of the names, kept in
`bench/secret_bench.py` as the baseline). The corpus: the session benchmark's conversation,
{c["texts"]} texts ({c["kib"]} KiB) and {c["payloads"]} function call and response JSON
payloads; the same texts with a credential in one of five ({c["with_credentials"]}: JSON
`api_key`, Stripe, `Authorization: Bearer`, a PostgreSQL URL, "my password is", GitHub) —
found {c["found_new"]} by the new detector, {c["found_old"]} by the old; ordinary texts and
payloads flagged by the new one: {c["false_positives_new"]}. Best of {ROUNDS} rounds.
Worst case: 256 KiB of one fragment repeated without a space (`eyJ`, `cookie:`, `--`,
`password=`, a zero-width or fullwidth character, … {len(WORST_FRAGMENTS)} of them: what
would make a backtracking pattern quadratic), detection and redaction, take at most
{worst["us_per_kib"]} µs per KiB (`{worst["fragment"]!r}`): every pattern is linear.

| measure | before | after | after / before |
| --- | --- | --- | --- |
{table}
"""


def run_section(command: str = ".venv/bin/python -m bench.secret_bench") -> dict:
    return run_in_process(command, SECTION, measure, report)


if __name__ == "__main__":
    run_section()
