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
  ``<password>…</password>``, ``Password=…;`` in connection strings, and JSON inside a JSON
  string (``"{\\"api_key\\": \\"…\\"}"``, its quotes escaped). The names:
  ``password(s)``, ``passwd``, ``pwd``, ``passphrase``, ``passcode``, ``passkey``,
  ``secret(s)``, ``credential(s)``, ``creds``, ``key(s)`` after a qualifier (``api key``,
  ``access key``, ``AccountKey``, ``signing key``, ``tls key``, …), ``token``, ``auth``,
  ``bearer``, ``jwt``, ``dsn``, ``sessionid``, ``connection string``, ``mnemonic`` and
  ``Passwort``, ``Kennwort``, ``mot de passe``, ``contraseña``, ``senha``, ``wachtwoord``,
  with any prefix (``aws_secret_access_key``, ``GITHUB_TOKEN``: the whole name is redacted
  with the value); a password's value may be three characters (``password: abc``; not a
  three-letter word such as ``the``), every other value four. ``pass``, ``pw`` and ``pswd``
  are everyday words, so only ``pass=…`` and a quoted key (``"pass": "…"``) count, never
  after a letter (``bypass=…``). ``Cookie:``/``Set-Cookie:`` headers. A value that is a
  placeholder (``***``, ``<your key>``, ``${VAR}``, ``{{var}}``, ``null``, ``[redacted]``)
  is not a credential; a ``… token`` value of digits only is a count (``token: 4096``);
- a credential named in a sentence, in English, German, French, Spanish, Portuguese or
  Dutch: "my password is …", "the API key was …", "my pin is …", "mein Passwort ist …",
  "das Passwort lautet …", "mon mot de passe est …", "mi contraseña es …", "minha senha é
  …" (after a possessive, any word that is not an ordinary adjective of those languages;
  otherwise a value of six characters or more with a digit or a symbol). A credential word
  that qualifies another noun is not one: "my password manager is great" passes. In
  Chinese, Japanese and Korean text ("密码是…", "密碼是…", "パスワードは…", "비밀번호는…",
  or the name and a colon), the Latin run after the name, when it has a digit or a symbol
  or eight letters or more (a password written in kana or hanzi is not found);
- command lines: ``curl -u user:password`` (``--user``), ``mysql -pPASSWORD`` (and
  ``mariadb``, ``mysqldump``, …; ``-P`` is a port), ``sshpass -p …``, ``docker login -p …``
  (``podman``, ``nerdctl``, ``buildah``, ``helm registry``): only the password is redacted;
- ``Authorization:`` / ``Proxy-Authorization:`` headers of any scheme, ``Bearer …``, and
  ``Basic …`` whose base64 decodes to ``user:password``;
- private-key blocks (PEM, OpenSSH, PGP), their armour also broken by a newline (an event's
  text parts are read joined by newlines, so a block split across two parts is one block)
  or short of dashes: redaction takes the block whole, to its END line or to the end of the
  text; an END line without its BEGIN takes the base64 lines right before it;
- credentials in URLs (``postgres://user:pass@host``, ``redis://:pass@host``; only the
  ``user:pass@`` part is redacted), in Azure SAS query strings (``sig=…``), in signed URLs
  (``X-Goog-Signature``, ``X-Goog-Credential``, ``X-Amz-Signature``, ``X-Amz-Credential``,
  ``X-Amz-Security-Token``), and webhook URLs, whose path is the credential (Slack, Discord,
  Microsoft Teams);
- base64 (standard or URL-safe) of JSON (it begins ``eyJ``, ``ewo`` or ``W3si``) whose
  decoded text holds a credential, such as a service account's key file: the whole run;
- provider formats: AWS access key ids (``AKIA…``, ``ASIA…``) and 40-character secret keys
  (mixed-case base64 of high entropy), Stripe ``sk_live_``/``sk_test_``/``rk_…``/``whsec_``,
  OpenAI/Anthropic ``sk-…``, Slack ``xox…-``/``xapp-``/webhook URLs, GitHub ``ghp_``/
  ``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_``, GitLab ``glpat-``, Google ``AIza…``/
  ``ya29.``/``1//0…`` refresh tokens, JWTs (``eyJ….eyJ….``), SendGrid, Twilio ``SK…``, npm,
  PyPI, Hugging Face, Shopify, DigitalOcean, Square, Telegram bot tokens, Slack ``xoxe-``
  refresh tokens, Vault ``hvs.``/``hvb.``/``hvr.``, Databricks ``dapi…``, Notion
  ``secret_…``/``ntn_…``, Mailgun ``key-…``, Linear ``lin_api_…``, Doppler ``dp.st.…`` (and
  ``dp.pt.``, ``dp.sa.``, …), Atlassian ``ATATT…``, Grafana ``glsa_…``/``glc_…``, age
  ``AGE-SECRET-KEY-1…``, Azure AD client secrets (``…8Q~…``), AWS STS session tokens
  (``FwoGZXIvYXdz…``, ``IQoJb3JpZ2lu…``), and ctxadmin's own API keys (``ctx_…``) and tool
  tokens (``ctt_…``).

Text is matched after NFKC normalisation with Unicode format characters (category Cf:
zero-width spaces and joiners, soft hyphens, direction marks) removed, so a fullwidth
``password=…`` (U+FF50 …) and ``pass\\u200bword=…`` are found; redaction maps each span back
to the original text and replaces exactly that span (format characters inside it included).
ASCII text, and text already in NFKC without format characters, is matched as it is (no
copy); ``looks_like_secret`` normalises the whole text at once (no offsets to keep), so the
two can differ only where NFKC composes across characters, and a caller that redacts then
checks again (outbox ingestion, the extractive summarizer) drops what is still flagged.
Homoglyphs from other scripts (a Cyrillic ``\\u0430`` for ``a``) are not folded.

Why our own patterns rather than a detector library: detect-secrets 1.5.0 was measured on
the same corpus first, in process through ``scan_line``: with its default plugins it flags
67 of the 71 ordinary texts (the entropy plugins fire on plain sentences); with its regex and
keyword plugins alone it misses 60 of the 93 credential texts (``sk_test_``, ``github_pat_``,
``ya29.``, ``Authorization: Basic``, URLs with passwords, "my password is …", every fullwidth
or zero-width-split form, …) and takes 5-13 ms per KiB, where this set takes about 0.1 ms;
it has had no release since 2024-05. Its maintained fork, bc-detect-secrets 1.5.52, measured
on the grown corpus (137 credential texts, 108 ordinary ones, line by line): with its default
plugins it flags 90 of the ordinary texts and misses 10 credentials; without the entropy
plugins it flags 1 and misses 110 (every sentence, URL, header, command line and most
provider formats); 4-6 ms per KiB either way. Both read source files line by line, where we
read conversation: sentences in several languages, NFKC forms, text parts joined. Hosted
scanners (ggshield) send the text out, which a content-free service cannot do. So the
patterns stay our own, with the corpus test (``tests/ctxadmin/test_secret_corpus.py``) as
their specification.
"""

from __future__ import annotations

import base64
import binascii
import re
import string
import sys
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

from ctxadmin.credential_patterns import (
    _PEM_BEGIN_RE,
    _PEM_END_RE,
    PATTERN_DETECTORS,
    Detector,
    _has_token_run,
    _name_start,
    _token,
)

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


_BASE64_CHARS = frozenset(string.ascii_letters + string.digits + "+/=")
_LINE_ENDS = ("\r\n", "\n", "\\r\\n", "\\n")  # as written, or escaped as JSON writes them


def _armour_before(text: str, start: int) -> int:
    """Where the base64 lines right before ``start`` (an END line) begin."""
    while True:
        end = next((start - len(e) for e in _LINE_ENDS if text.endswith(e, 0, start)), None)
        if end is None:
            return start
        line = end
        while line > 0 and text[line - 1] in _BASE64_CHARS:
            if text[line - 1] in "nr" and line >= 2 and text[line - 2] == "\\":
                break  # an escaped line end
            line -= 1
        if line == end:
            return start
        if line > 0 and not text.endswith(_LINE_ENDS, 0, line):
            # Not a whole line: a long run of base64 ending it is the armour's first line.
            return line if end - line >= 40 else start
        start = line


def _private_key_blocks(text: str) -> list[tuple[int, int]]:
    """The private-key blocks of ``text``: from a BEGIN line to its END line (or the end of
    the text); an END line without its BEGIN takes the base64 lines right before it."""
    ends = [m.span() for m in _PEM_END_RE.finditer(text)] if "END" in text else []
    blocks: list[tuple[int, int]] = []
    cursor, index = 0, 0  # both move forward only: linear in the text
    for begin in _PEM_BEGIN_RE.finditer(text) if "BEGIN" in text else ():
        if begin.start() < cursor:
            continue
        while index < len(ends) and ends[index][0] < begin.end():
            start, end = ends[index]
            if start >= cursor:  # an END before this BEGIN, in no block
                blocks.append((_armour_before(text, start), end))
            index += 1
        if index < len(ends):
            cursor = ends[index][1]
            index += 1
        else:
            cursor = len(text)
        blocks.append((begin.start(), cursor))
    blocks += [(_armour_before(text, start), end) for start, end in ends[index:]]
    return blocks


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _spans(text: str) -> Iterator[tuple[int, int]]:
    """The credential spans of normalised ``text``, in detector order."""
    # Lowercased with offsets kept: str.lower() unless it lengthened a character (İ), then
    # ASCII letters only.
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = text.translate(_ASCII_LOWER)
    token_run = None
    for detector in DETECTORS:
        if detector.token:
            if token_run is None:
                token_run = _has_token_run(text)
            if not token_run:
                continue
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


MAX_DECODED = 64 * 1024  # base64 characters of one encoded credential decoded at most


def _encoded_credential(match: re.Match, _hay: str, text: str) -> bool:
    """Base64 (standard or URL-safe) of JSON that holds a credential."""
    value = match.group(0)[:MAX_DECODED].rstrip("=").replace("-", "+").replace("_", "/")
    try:
        decoded = base64.b64decode(value[: len(value) - len(value) % 4], validate=True)
        return looks_like_secret(decoded.decode("utf-8"))
    except (binascii.Error, ValueError):
        return False


DETECTORS: tuple[Detector, ...] = (
    *PATTERN_DETECTORS,
    # Base64 of JSON (``{"``, ``{\n``, ``[{"``) that holds a credential, decoded once more.
    _token(
        "eyJ",
        "ewo",
        "W3si",
        pattern=r"(?<![A-Za-z0-9+/_-])(?:eyJ|ewo|W3si)[A-Za-z0-9+/_-]{20,}={0,2}",
        check=_encoded_credential,
    ),
)

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
        spans = [*_private_key_blocks(normal), *_spans(normal)]
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
