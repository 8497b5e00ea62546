"""Credential-looking text: detection and redaction (pure; no Django import).

``looks_like_secret`` and ``redact_secret_text`` are the one detector of the service: memory
add refuses content it flags, ``memories/events`` skips events it flags, outbox ingestion
redacts what it finds, compaction omits flagged request excerpts and redacts every other
summary text, the summary validator rejects a summary holding one, and error messages
replace an echoed client string it flags.

What it finds (a curated set of patterns compiled once; ``tests/secret_tables.py`` holds the
corpus of credential texts and of ordinary texts that must pass, which
``tests/ctxadmin/test_secret_detectors.py`` runs):

- a credential name assigned a value, in any of the usual notations: ``api_key=…``,
  ``"api_key": "…"``, ``'password' => '…'``, ``DB_PASSWORD: …``, ``--password …``,
  ``<password>…</password>``, ``Password=…;`` in connection strings. The names:
  ``password(s)``, ``passwd``, ``pwd``, ``passphrase``, ``passcode``, ``passkey``,
  ``secret(s)``, ``credential(s)``, ``creds``, ``key(s)`` after a qualifier (``api key``,
  ``access key``, ``AccountKey``, ``signing key``, …), ``token``, ``auth``, ``bearer``,
  ``jwt``, ``dsn``, ``sessionid``, ``connection string``, ``mnemonic`` and a few
  non-English words, with any prefix (``aws_secret_access_key``, ``GITHUB_TOKEN``: the
  whole name is redacted with the value); ``Cookie:``/``Set-Cookie:`` headers. A value that is a
  placeholder (``***``, ``<your key>``, ``${VAR}``, ``{{var}}``, ``null``, ``[redacted]``)
  is not a credential; a ``… token`` value of digits only is a count (``token: 4096``);
- a credential named in a sentence: "my password is …", "the API key was …", "my pin is
  …" (after a possessive, any word that is not an ordinary adjective; otherwise a value of
  six characters or more with a digit or a symbol);
- ``Authorization:`` / ``Proxy-Authorization:`` headers of any scheme, ``Bearer …``, and
  ``Basic …`` whose base64 decodes to ``user:password``;
- private-key blocks (PEM, OpenSSH, PGP): redaction takes the block whole, to its END line
  or to the end of the text;
- credentials in URLs (``postgres://user:pass@host``, ``redis://:pass@host``; only the
  ``user:pass@`` part is redacted) and in Azure SAS query strings (``sig=…``);
- provider formats: AWS access key ids (``AKIA…``, ``ASIA…``) and 40-character secret keys
  (mixed-case base64 of high entropy), Stripe ``sk_live_``/``sk_test_``/``rk_…``/``whsec_``,
  OpenAI/Anthropic ``sk-…``, Slack ``xox…-``/``xapp-``/webhook URLs, GitHub ``ghp_``/
  ``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_``, GitLab ``glpat-``, Google ``AIza…``/
  ``ya29.``/``1//0…`` refresh tokens, JWTs (``eyJ….eyJ….``), SendGrid, Twilio ``SK…``, npm,
  PyPI, Hugging Face, Shopify, DigitalOcean, Square, Telegram bot tokens, and ctxadmin's own
  API keys (``ctx_…``) and tool tokens (``ctt_…``).

Text is matched after NFKC normalisation with Unicode format characters (category Cf:
zero-width spaces and joiners, soft hyphens, direction marks) removed, so a fullwidth
``password=…`` (U+FF50 …) and ``pass\\u200bword=…`` are found; redaction maps each span back
to the original text and replaces exactly that span (format characters inside it included).
ASCII text, and text already in NFKC without format characters, is matched as it is (no
copy); ``looks_like_secret`` normalises the whole text at once (no offsets to keep), so the
two can differ only where NFKC composes across characters, and a caller that redacts then
checks again (outbox ingestion, the extractive summarizer) drops what is still flagged.
Homoglyphs from other scripts (a Cyrillic ``\\u0430`` for ``a``) are not folded.

detect-secrets 1.5.0 was measured on the same corpus first, in process through
``scan_line``: with its default plugins it flags 67 of the 71 ordinary texts (the entropy
plugins fire on plain sentences); with its regex and keyword plugins alone it misses 60 of
the 93 credential texts (``sk_test_``, ``github_pat_``, ``ya29.``, ``Authorization: Basic``,
URLs with passwords, "my password is …", every fullwidth or zero-width-split form, …) and
takes 5-13 ms per KiB, where this set takes about 0.1 ms. So the patterns are our own, with
the corpus test as their specification.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import string
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

REDACTED = "[redacted]"


def _format_characters() -> str:
    """Every code point of category Cf (they live in the BMP, plane 1 and plane 14)."""
    found = [
        chr(point)
        for block in (range(0x20000), range(0xE0000, min(0xE1000, sys.maxunicode + 1)))
        for point in block
        if unicodedata.category(chr(point)) == "Cf"
    ]
    return "".join(found)


def _ranges(characters: str) -> str:
    """A regex character class of ``characters`` as ranges (far faster to match than a
    class of single characters)."""
    points = sorted(map(ord, characters))
    ranges, start = [], points[0]
    for previous, point in zip(points, [*points[1:], None], strict=True):
        if point != previous + 1:
            ranges.append(
                re.escape(chr(start)) + ("-" + re.escape(chr(previous)) if previous > start else "")
            )
            start = point
    return "[" + "".join(ranges) + "]"


_FORMAT = _format_characters()
_FORMAT_SET = frozenset(_FORMAT)
_HAS_FORMAT = re.compile(_ranges(_FORMAT))


@lru_cache(maxsize=4096)
def _nfkc(char: str) -> str:
    return unicodedata.normalize("NFKC", char)


def normalised(text: str) -> tuple[str, list[int] | None]:
    """``text`` as the detector reads it (NFKC, format characters removed), and for each of
    its characters the index of the original character it came from (None: unchanged)."""
    if text.isascii() or (
        unicodedata.is_normalized("NFKC", text) and _HAS_FORMAT.search(text) is None
    ):
        return text, None
    pieces: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        if char in _FORMAT_SET:
            continue
        piece = char if char.isascii() else _nfkc(char)
        pieces.append(piece)
        origin.extend([index] * len(piece))
    return "".join(pieces), origin


# ----------------------------------------------------------------------------- patterns

_SEP = r"[-_. ]?"
# What may stand before ``key`` in a credential's name (api key, AccountKey, x-functions-key).
_QUALIFIED_KEY = re.compile(
    r"(?:api|access|secret|private|signing|encryption|decryption|master|client|account|storage"
    r"|service|subscription|app|application|consumer|hmac|shared|license|deploy|ssh|gpg|pgp"
    r"|write|admin|root|sas|session|crypto|functions|webhook|user|dev|developer|auth)[-_. ]?\Z"
)
# Each family of credential names starts with a literal, so the regex engine finds its
# candidates by a fast literal search (matched in ASCII-lowercased text).
_FAMILIES = {
    "pass": r"pass(?:words?|wd|wort|phrase|code|key)",
    "pwd": r"pwd",
    "secret": r"secrets?",
    "cred": r"cred(?:entials?|s)",
    "conn": rf"conn(?:ection{_SEP}string|{_SEP}str)",
    "dsn": r"dsn",
    "auth": r"auth",
    "bearer": r"bearer",
    "jwt": r"jwt",
    "sess": r"sess(?:ion)?id",
    "mnemonic": r"mnemonic",
    "kennwort": r"kennwort",
    "contrase": r"contrase[ñn]a",
    "senha": r"senha",
    "key": r"keys?",  # after a qualifier (checked)
    "token": r"token",  # a value of digits alone is a count (checked)
}
_ANY_NAME = "(?:" + "|".join(_FAMILIES.values()) + ")"
# In a sentence ("my password is …"): these families, and ``pin``.
_SPOKEN = frozenset({"pass", "secret", "cred", "key", "token"})
# Values: quoted (to the closing quote) or bare (to a space, quote, comma or semicolon); a
# placeholder is not a value.
_PLACEHOLDER = (
    r"(?!(?:\*{3,}|x{4,}\b|\[redacted\]|<[^>\n]{0,60}>|\$\{|\{\{|%\(|\.\.\.|…"
    r"|(?:null|none|nil|undefined|true|false|empty|required|optional|string|redacted|hidden"
    r"|your[-_ a-z]*)(?![\w-])))"
)
_VALUE = (
    rf"""(?:"{_PLACEHOLDER}[^"\n]{{4,}}"|'{_PLACEHOLDER}[^'\n]{{4,}}'|`{_PLACEHOLDER}"""
    rf"""[^`\n]{{4,}}`|{_PLACEHOLDER}[^\s"'`,;]{{4,}})"""
)
_ASSIGN = r"""["'`\]]{0,2}[ \t]*(?:=>|:=|::|[:=])\s{0,4}"""
_SAID = rf"""\s+(?:is|was)\s*:?\s*(?P<said>["'`]?{_PLACEHOLDER}[^\s"'`,;]{{4,}})"""
_ASSIGNED = rf"{_ASSIGN}(?P<v>{_VALUE})"
_SAID_BRANCH = "|" + _SAID
_POSSESSIVE = re.compile(r"\b(?:my|our|your|his|her|their)\s+(?:[\w-]+\s+){0,2}\Z")
_ORDINARY = frozenset(
    "being not now still also just very really the a an too so changed expired wrong incorrect"
    " invalid correct right required missing empty blank same different weak strong secure"
    " safe stored saved long short hidden encrypted reset set locked lost forgotten sent shown"
    " visible below above attached here there in on at for with".split()
)


def _said(match: re.Match, hay: str) -> bool:
    """A credential given in a sentence: after a possessive ("my password is …") any word
    that is not an ordinary adjective; otherwise a value with a digit or a symbol."""
    value = match.group("said").strip("\"'`")
    if _POSSESSIVE.search(hay, max(0, match.start() - 48), match.start()):
        return value not in _ORDINARY
    return len(value) >= 6 and any(not c.isalpha() and c not in "-'" for c in value)


def _named(family: str) -> Callable[[re.Match, str, str], bool]:
    def check(match: re.Match, hay: str, _text: str) -> bool:
        start = match.start()
        if family == "key" and not _QUALIFIED_KEY.search(hay, max(0, start - 16), start):
            return False
        if family == "pin" and start and hay[start - 1].isalnum():
            return False
        if "said" in match.re.groupindex and match.group("said") is not None:
            return _said(match, hay)
        return family != "token" or not match.group("v").strip("\"'`").isdigit()

    return check


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _aws_secret(match: re.Match, _hay: str, _text: str) -> bool:
    """A 40-character AWS secret key rather than a hash or a word: mixed case with digits,
    high entropy."""
    value = match.group(0)
    return (
        any(c.islower() for c in value)
        and any(c.isupper() for c in value)
        and any(c.isdigit() for c in value)
        and _entropy(value) >= 4.2
    )


def _basic_credentials(match: re.Match, _hay: str, text: str) -> bool:
    """Base64 of ``user:password`` (printable), read from the text as written."""
    value = text[match.start("b64") : match.end("b64")]
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and decoded.isascii() and decoded.decode("ascii").isprintable()


_BASE64 = (string.ascii_letters + string.digits + "+/").encode()
_BASE64_RUNS = bytes.maketrans(
    bytes(range(256)), bytes(1 if byte in _BASE64 else 0 for byte in range(256))
)
_FORTY = b"\x01" * 40


def _long_token(text: str) -> bool:
    """Whether the text has a run of 40 base64 characters (bytes.translate: no regex pass)."""
    return _FORTY in text.encode("utf-8", "replace").translate(_BASE64_RUNS)


@dataclass(frozen=True)
class Detector:
    """One pattern, tried only when one of its ``anchors`` is in the text (a substring test
    is far cheaper than a regex pass) or its ``gate`` says so; ``lower``: matched in
    ASCII-lowercased text; ``check``: a second look at a match; a group named ``s`` is the
    span redacted (else the whole match); ``named``: the span starts with the whole name
    the match found the end of (``aws_secret_access_key``, ``DB_PASSWORD``)."""

    anchors: tuple[str, ...]
    pattern: re.Pattern
    lower: bool = True
    check: Callable[[re.Match, str, str], bool] | None = None
    gate: Callable[[str], bool] | None = None
    named: bool = False


def _name_start(hay: str, start: int) -> int:
    """Where the identifier ending at ``start`` begins (at most 64 characters back)."""
    floor = max(0, start - 64)
    while start > floor and (hay[start - 1].isalnum() or hay[start - 1] in "_.-"):
        start -= 1
    return start


def _lower(*anchors: str, pattern: str, check=None, named: bool = False) -> Detector:
    return Detector(anchors, re.compile(pattern), True, check, None, named)


def _exact(*anchors: str, pattern: str, check=None, gate=None) -> Detector:
    return Detector(anchors, re.compile(pattern), False, check, gate)


DETECTORS: tuple[Detector, ...] = (
    # Headers first: ``Authorization: Bearer …`` is taken whole, scheme and value.
    _lower(
        "authorization",
        pattern=r"authorization[\"'`]?[ \t]*[:=][ \t]*[\"'`]?(?:[a-z0-9-]+[ \t]+)?"
        rf"{_PLACEHOLDER}[^\s\"'`]{{8,}}",
    ),
    _lower("cookie", pattern=r"cookie[ \t]*:[ \t]*[^\s=;]{1,128}=[^\s;]{4,}"),
    # A credential name assigned a value, or given in a sentence (any prefix:
    # aws_secret_access_key, DB_PASSWORD, "my wifi password is …").
    *(
        _lower(
            anchor,
            pattern=rf"{name}(?:{_ASSIGNED}{_SAID_BRANCH if anchor in _SPOKEN else ''})",
            check=_named(anchor),
            named=True,
        )
        for anchor, name in _FAMILIES.items()
    ),
    _lower("pin", pattern=rf"pin(?:{_SAID})", check=_named("pin")),
    _lower("--", pattern=rf"(?<!-)--[a-z0-9-]{{0,40}}?{_ANY_NAME}[ \t]+{_VALUE}"),
    _lower("<", pattern=rf"<[a-z0-9_:-]{{0,40}}?{_ANY_NAME}>[ \t]*{_PLACEHOLDER}[^<\s]{{4,}}"),
    _lower("bearer", pattern=r"bearer[ \t]+[a-z0-9._~+/=-]{12,}"),
    _lower("basic", pattern=r"basic[ \t]+(?P<b64>[a-z0-9+/]{8,}={0,2})", check=_basic_credentials),
    # Credentials in URLs (only user:password@ is redacted); Azure SAS signatures.
    _lower("://", pattern=r"://(?P<s>[^\s/:@?#\"'`<>]*:[^\s/@?#\"'`<>]+@)"),
    _lower("sig=", pattern=r"[?&]sig=[a-z0-9%+/=]{16,}"),
    _lower("hooks.slack.com", pattern=r"https://hooks\.slack\.com/services/[a-z0-9_/]{20,}"),
    # Provider formats (case-sensitive).
    _exact("-----BEGIN", pattern=r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"),
    _exact("AKIA", "ASIA", pattern=r"(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    _exact(
        pattern=r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
        check=_aws_secret,
        gate=_long_token,
    ),
    _exact(
        "sk_",
        "rk_",
        "whsec_",
        pattern=r"(?:(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{10,}|whsec_[A-Za-z0-9]{20,})",
    ),
    _exact("sk-", "pk-", "rk-", pattern=r"(?:sk|pk|rk)-[A-Za-z0-9_-]{20,}"),
    _exact("xox", "xapp-", pattern=r"(?:xox[abposr]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,})"),
    _exact(
        "ghp_",
        "gho_",
        "ghu_",
        "ghs_",
        "ghr_",
        "github_pat_",
        "glpat-",
        pattern=r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}"
        r"|glpat-[A-Za-z0-9_-]{20,})",
    ),
    _exact(
        "AIza",
        "ya29.",
        "1//0",
        pattern=r"(?:AIza[0-9A-Za-z_-]{30,}|ya29\.[0-9A-Za-z_-]{20,})"
        r"|(?<![\w/])1//0[0-9A-Za-z_-]{30,}",
    ),
    _exact(
        "eyJ",
        pattern=r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
    ),
    _exact(
        "SG.",
        "SK",
        "npm_",
        "pypi-",
        "hf_",
        "shp",
        "_v1_",
        "sq0",
        ":AA",
        "ctx_",
        "ctt_",
        pattern=r"\b(?:SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}|SK[0-9a-f]{32}\b"
        r"|npm_[A-Za-z0-9]{36}\b|pypi-AgE[A-Za-z0-9_-]{50,}|hf_[A-Za-z0-9]{30,}"
        r"|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b|do[opr]_v1_[a-f0-9]{64}\b"
        r"|sq0(?:atp|csp)-[0-9A-Za-z_-]{22,}|ct[xt]_[a-z0-9]{10}_[A-Za-z0-9_-]{43})",
    ),
    _exact(":AA", pattern=r"(?<![0-9])[0-9]{8,10}:AA[0-9A-Za-z_-]{33}\b"),  # Telegram bots
)
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
    r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _spans(text: str) -> Iterator[tuple[int, int]]:
    """The credential spans of normalised ``text``, in detector order."""
    # Lowercased with offsets kept: str.lower() unless it lengthened a character (İ), then
    # ASCII letters only.
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = text.translate(_ASCII_LOWER)
    for detector in DETECTORS:
        hay = lowered if detector.lower else text
        if detector.gate is not None:
            if not detector.gate(hay):
                continue
        else:
            for anchor in detector.anchors:
                if anchor in hay:
                    break
            else:
                continue
        check = detector.check
        for match in detector.pattern.finditer(hay):
            if check is None or check(match, hay, text):
                if detector.named:
                    yield _name_start(hay, match.start()), match.end()
                else:
                    yield match.span("s") if "s" in detector.pattern.groupindex else match.span()


# ----------------------------------------------------------------------------- entry points


def looks_like_secret(text: str) -> bool:
    """Whether free text appears to contain a credential (read as NFKC of the whole text
    with format characters removed: no offsets are needed to answer)."""
    if not text.isascii():
        text = _HAS_FORMAT.sub("", unicodedata.normalize("NFKC", text))
    return next(_spans(text), None) is not None


def redact_secret_text(text: str, marker: str = REDACTED) -> str:
    """``text`` with every credential-looking span replaced by ``marker`` (a span found in
    the normalised text replaces the original characters it came from; a private-key block
    goes whole, to its END line or to the end of the text)."""
    for _ in range(3):  # a redaction can join what is left into a new match; rarely twice
        normal, origin = normalised(text)
        spans = [m.span() for m in _PRIVATE_KEY_BLOCK.finditer(normal)] + list(_spans(normal))
        if not spans:
            return text
        if origin is not None:
            spans = [(origin[start], origin[end - 1] + 1) for start, end in spans]
        merged: list[list[int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:  # overlapping or touching: one marker
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        pieces, cursor = [], 0
        for start, end in merged:
            pieces += [text[cursor:start], marker]
            cursor = end
        pieces.append(text[cursor:])
        text = "".join(pieces)
    return text
