"""What the credential detector costs per KiB: ``looks_like_secret`` and
``redact_secret_text`` over ordinary conversation text, over ordinary text in other
languages (the normalising path), and over text full of secrets (a credential in every
sentence, in the formats the detector knows), in process.

``python -m bench --only redaction`` (a few seconds, no service) rewrites the "Secret
redaction per KiB" section of ``bench/BENCHMARKS.md``; ``make bench`` runs it after the
secret detectors' section. Figures are the best of several rounds (a shared 2-core machine).
"""

from __future__ import annotations

import base64
import json
import random
import string

from bench.secret_bench import ROUNDS, best_seconds
from bench.sections import run_in_process
from bench.workload import conversation
from ctxadmin.credentials import looks_like_secret, redact_secret_text

SECTION = "## Secret redaction per KiB"
ALNUM = string.ascii_letters + string.digits
FOREIGN = (
    "Der Reisende fragt, ob der Flug nach München am Donnerstag um 9:40 Uhr gebucht ist. ",
    "Le passager préfère une place côté couloir pour le vol de jeudi à Lyon. ",
    "El pasajero quiere cambiar su vuelo a Sevilla para el viernes por la tarde. ",
    "木曜日のリスボン行きの便を変更できますか。通路側の席を希望します。",
    "我想把周四去里斯本的航班改到周五\uff0c靠过道的座位。",
)


def _credentials(rng: random.Random) -> list:
    """Makers of one sentence holding one credential each, in formats the detector knows."""

    def fake(n: int, alphabet: str = ALNUM) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    def encoded() -> str:
        blob = json.dumps({"type": "service_account", "client_secret": fake(32)})
        return base64.b64encode(blob.encode()).decode()

    return [
        lambda: f'The config was {{"api_key": "{fake(32)}"}} in the repo.',
        lambda: f"Charge it with sk_live_{fake(24)} please.",
        lambda: f"Send Authorization: Bearer {fake(40)} with it.",
        lambda: f"It connects to postgres://app:{fake(12)}@db:5432/app today.",
        lambda: f"My password is {fake(10)} for now.",
        lambda: f"Use ghp_{fake(36)} for the pipeline.",
        lambda: f"Run curl -u admin:{fake(14)} https://api.example.com first.",
        lambda: f"Then mysql -h db -u root -p{fake(12)} app loads it.",
        lambda: f"Vault gave hvs.{fake(90, ALNUM + '_-')} to the job.",
        lambda: f"mein Passwort ist {fake(9, string.ascii_lowercase)} seit gestern.",
        lambda: f"mon mot de passe est {fake(9, string.ascii_lowercase)} depuis hier.",
        lambda: f"パスワードは{fake(10)}1です。",
        lambda: f"我的密码是{fake(10)}2。",
        lambda: 'The body was "{\\"password\\": \\"' + fake(12) + '\\"}" again.',
        lambda: f"The key file is {encoded()} in base64.",
        lambda: (
            f"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA{fake(64)}\n"
            "-----END RSA PRIVATE KEY-----"
        ),
        lambda: (
            f"The hook is https://discord.com/api/webhooks/{fake(18, string.digits)}/"
            f"{fake(68, ALNUM + '_-')} for alerts."
        ),
    ]


def corpus(seed: int = 11) -> dict[str, list[str]]:
    rng = random.Random(seed)  # noqa: S311 - a reproducible corpus, not a secret
    texts = [
        part["text"]
        for event in conversation(rng, 400, "redaction-bench")
        for part in event["content"]["parts"]
        if "text" in part
    ]
    foreign = ["".join(rng.choice(FOREIGN) for _ in range(6)) for _ in range(200)]
    makers = _credentials(rng)
    secrets = [" ".join(rng.choice(makers)() for _ in range(8)) for _ in range(200)]
    return {
        "ordinary conversation text": texts,
        "ordinary text in German, French, Spanish, Japanese and Chinese": foreign,
        "text full of secrets (a credential in every sentence)": secrets,
    }


def per_kib(call, texts: list[str]) -> float:
    kib = sum(len(text.encode("utf-8")) for text in texts) / 1024

    def run():
        for text in texts:
            call(text)

    return round(best_seconds(run) / kib * 1e6, 1)


def measure() -> dict:
    results = {}
    for name, texts in corpus().items():
        results[name] = {
            "kib": round(sum(len(t.encode("utf-8")) for t in texts) / 1024, 1),
            "flagged": sum(map(looks_like_secret, texts)),
            "texts": len(texts),
            "looks_like_secret": per_kib(looks_like_secret, texts),
            "redact_secret_text": per_kib(redact_secret_text, texts),
        }
    return results


def report(results: dict, stamp: str) -> str:
    rows = "\n".join(
        f"| {name} | {r['texts']} ({r['kib']} KiB) | {r['flagged']} | "
        f"{r['looks_like_secret']} | {r['redact_secret_text']} |"
        for name, r in results.items()
    )
    return f"""{SECTION}

{stamp}

The credential detector (`ctxadmin/credentials.py`) per KiB of text, in process, best of
{ROUNDS} rounds: `looks_like_secret` (memory add, `memories/events`, error echoes) and
`redact_secret_text` (outbox ingestion, summaries). Ordinary text is the session benchmark's
conversation and sentences in five other languages (normalised first); text full of secrets
has a credential in every sentence (eight per text, from 17 formats: JSON, Stripe, bearer
headers, database URLs, "my password is", GitHub, `curl -u`, `mysql -p`, Vault, German,
French, Japanese and Chinese sentences, JSON inside a JSON string, base64 of a JSON key file,
a PEM block, a Discord webhook).

| text | texts | flagged | `looks_like_secret` (µs per KiB) | `redact_secret_text` (µs per KiB) |
| --- | --- | --- | --- | --- |
{rows}
"""


def run_section(command: str = ".venv/bin/python -m bench --only redaction") -> dict:
    return run_in_process(command, SECTION, measure, report)
