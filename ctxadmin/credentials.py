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
    r"|write|admin|root|sas|session|crypto|functions|webhook|user|dev|developer|auth|priv|tls"
    r"|ssl)[-_. ]?\Z"
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
    "mot": rf"mot{_SEP}de{_SEP}passe",
    "wachtwoord": r"wachtwoord",
    "key": r"keys?",  # after a qualifier (checked)
    "token": r"token",  # a value of digits alone is a count (checked)
}
_ANY_NAME = "(?:" + "|".join(_FAMILIES.values()) + ")"
# In a sentence ("my password is …", "mein Passwort ist …", "mon mot de passe est …", "mi
# contraseña es …"): these families, and ``pin``.
_SPOKEN = frozenset(
    {"pass", "secret", "cred", "key", "token", "kennwort", "contrase", "senha", "mot", "wachtwoord"}
)
# The verbs that give it: English, German, French, Spanish, Portuguese, Dutch.
_VERBS = r"is|was|ist|war|lautet|est|était|etait|es|era|fue|é"
# A password may be short (``password: abc``); a word of three letters is then prose.
_SHORT_PROSE = frozenset("the and for you see set not any all use via yes new old one two".split())
# Values: quoted (to the closing quote) or bare (to a space, quote, comma or semicolon); a
# placeholder is not a value.
_PLACEHOLDER = (
    r"(?!(?:\*{3,}|x{4,}\b|\[redacted\]|<[^>\n]{0,60}>|\$\{|\{\{|%\(|\.\.\.|…"
    r"|(?:null|none|nil|undefined|true|false|empty|required|optional|string|redacted|hidden"
    r"|your[-_ a-z]*)(?![\w-])))"
)


def _value(least: int) -> str:
    """A value of at least ``least`` characters: quoted (to the closing quote; also quoted
    with escaped quotes, as JSON inside a JSON string writes it) or bare (to a space, quote,
    comma or semicolon)."""
    return (
        rf'(?:\\+"{_PLACEHOLDER}[^"\n]{{{least},}}"|"{_PLACEHOLDER}[^"\n]{{{least},}}"'
        rf"""|'{_PLACEHOLDER}[^'\n]{{{least},}}'|`{_PLACEHOLDER}[^`\n]{{{least},}}`"""
        rf"""|{_PLACEHOLDER}[^\s"'`,;\\]{{{least},}})"""
    )


_VALUE = _value(4)
# The name's closing quote (escaped, in JSON inside a JSON string), then the operator.
_ASSIGN = r"""(?:\\{0,3}["'`\]]){0,2}[ \t]*(?:=>|:=|::|[:=])\s{0,4}"""
_SAID = rf"""\s+(?:{_VERBS})\s*:?\s*(?P<said>(?:\\{{0,3}}["'`])?{_PLACEHOLDER}[^\s"'`,;\\]{{4,}})"""
_SAID_BRANCH = "|" + _SAID


def _assigned(least: int) -> str:
    return rf"{_ASSIGN}(?P<v>{_value(least)})"


_POSSESSIVE = re.compile(
    r"\b(?:my|our|your|his|her|their|mein|meine|unser|unsere|dein|deine|sein|seine|ihr|ihre"
    r"|mon|ma|notre|votre|ton|son|sa|mi|mis|tu|su|nuestra|nuestro|vuestra|meu|minha|nossa"
    r"|mijn|ons|onze|jouw)\s+(?:[\w-]+\s+){0,2}\Z"
)
# After a possessive, the words that describe a credential rather than give it (English,
# German, French, Spanish).
_ORDINARY = frozenset(
    "being not now still also just very really the a an too so changed expired wrong incorrect"
    " invalid correct right required missing empty blank same different weak strong secure"
    " safe stored saved long short hidden encrypted reset set locked lost forgotten sent shown"
    " visible below above attached here there in on at for with"
    " falsch richtig ungültig abgelaufen nicht noch sehr gesperrt vergessen geändert neu lang"
    " kurz sicher schwach stark leer geheim hier unten oben"
    " faux fausse incorrect incorrecte correct correcte expiré expirée invalide trop très pas"
    " oublié oubliée changé changée bloqué bloquée perdu perdue vide long longue court courte"
    " sûr sûre faible fort forte nouveau nouvelle ici dessous"
    " incorrecta incorrecto correcta correcto inválida inválido caducada caducado expirada"
    " expirado muy demasiado olvidada olvidado bloqueada bloqueado segura seguro débil fuerte"
    " nueva nuevo larga largo corta corto vacía vacío aquí abajo".split()
)


def _said(match: re.Match, hay: str) -> bool:
    """A credential given in a sentence: after a possessive ("my password is …") any word
    that is not an ordinary adjective; otherwise a value with a digit or a symbol."""
    value = match.group("said").strip("\"'`\\").rstrip(".!?…:")  # the sentence's end
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
        value = match.group("v").strip("\"'`\\")
        if family == "pass" and len(value) == 3 and value in _SHORT_PROSE:
            return False
        return family != "token" or not value.isdigit()

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
    the match found the end of (``aws_secret_access_key``, ``DB_PASSWORD``); ``token``: its
    matches hold a run of ``TOKEN_RUN`` token characters, so a text without one is skipped
    before its anchors are looked for (one pass for all such patterns)."""

    anchors: tuple[str, ...]
    pattern: re.Pattern
    lower: bool = True
    check: Callable[[re.Match, str, str], bool] | None = None
    gate: Callable[[str], bool] | None = None
    named: bool = False
    token: bool = False


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


def _token(*anchors: str, pattern: str, check=None) -> Detector:
    """A provider's token format (case-sensitive, a long run of token characters)."""
    return Detector(anchors, re.compile(pattern), False, check, token=True)


# The shortest run of token characters (letters, digits, ``_.+/=~-``) a provider format
# holds (``xoxb-`` and ten more); found by one bytes.translate pass, as ``_long_token``.
TOKEN_RUN = 14
_TOKEN = (string.ascii_letters + string.digits + "_.+/=~-").encode()
_TOKEN_CHARS = bytes.maketrans(
    bytes(range(256)), bytes(1 if byte in _TOKEN else 0 for byte in range(256))
)
_TOKEN_RUN = b"\x01" * TOKEN_RUN


def _has_token_run(text: str) -> bool:
    return _TOKEN_RUN in text.encode("utf-8", "replace").translate(_TOKEN_CHARS)


def _short_value(match: re.Match, _hay: str, _text: str) -> bool:
    """A short password (``pw=abc``) rather than a word of prose."""
    return match.group("v").strip("\"'`\\") not in _SHORT_PROSE


def _unspaced_said(match: re.Match, _hay: str, _text: str) -> bool:
    """A password given in Chinese, Japanese or Korean text ("密码是…", "パスワードは…"): the
    Latin run after it, with a digit or a symbol, or of eight letters or more."""
    value = match.group("s")
    return len(value) >= 8 or any(not c.isalpha() for c in value)


def _encoded_credential(match: re.Match, _hay: str, text: str) -> bool:
    """Base64 (standard or URL-safe) of JSON that holds a credential."""
    value = match.group(0)[:MAX_DECODED].rstrip("=").replace("-", "+").replace("_", "/")
    try:
        decoded = base64.b64decode(value[: len(value) - len(value) % 4], validate=True)
        return looks_like_secret(decoded.decode("utf-8"))
    except (binascii.Error, ValueError):
        return False


MAX_DECODED = 64 * 1024  # base64 characters of one encoded credential decoded at most
# A private key's armour, also split by a newline (text parts joined; ``\n`` escaped, as
# in JSON) or with dashes missing; BEGIN takes the block, END alone the base64 lines before it.
_WS = r"(?:[ \t\r\n]|\\[nrt])"
_PEM_NAME = rf"(?:[A-Z0-9]+{_WS}+){{0,4}}?PRIVATE{_WS}+KEY(?:{_WS}+BLOCK)?"
_PEM_BEGIN = rf"-{{2,}}{_WS}*BEGIN{_WS}+{_PEM_NAME}"
_PEM_END = rf"-{{2,}}{_WS}*END{_WS}+{_PEM_NAME}[ \t]*-*"
_CLI = r"(?:[ \t]++\S++){0,12}?[ \t]+"  # up to 12 arguments before the flag
_CLI_SECRET = _PLACEHOLDER + r"""(?P<s>'[^'\n]{3,}'|"[^"\n]{3,}"|[^\s"'-][^\s"']{2,})"""

DETECTORS: tuple[Detector, ...] = (
    # Headers first: ``Authorization: Bearer …`` is taken whole, scheme and value.
    _lower(
        "authorization",
        "authorisation",
        pattern=r"authori[sz]ation[\"'`]?[ \t]*[:=][ \t]*[\"'`]?(?:[a-z0-9-]+[ \t]+)?"
        rf"{_PLACEHOLDER}[^\s\"'`]{{8,}}",
    ),
    _lower("cookie", pattern=r"cookie[ \t]*:[ \t]*[^\s=;]{1,128}=[^\s;]{4,}"),
    # A credential name assigned a value, or given in a sentence (any prefix:
    # aws_secret_access_key, DB_PASSWORD, "my wifi password is …").
    *(
        _lower(
            anchor,
            pattern=rf"{name}(?:{_assigned(3 if anchor == 'pass' else 4)}"
            rf"{_SAID_BRANCH if anchor in _SPOKEN else ''})",
            check=_named(anchor),
            named=True,
        )
        for anchor, name in _FAMILIES.items()
    ),
    _lower("pin", pattern=rf"pin(?:{_SAID})", check=_named("pin")),
    # ``pass`` and ``pw`` alone are everyday words: only where assigned with ``=`` or as a
    # quoted key (``?user=bob&pass=…``, ``"pw": "…"``), never after letters (bypass=).
    _lower(
        "pass",
        "pw",
        pattern=r"(?<![a-z0-9])(?:pass|pw|pswd)(?:[\"'`]?[ \t]*=|\\{0,3}[\"'`][ \t]*:)[ \t]*"
        rf"(?P<v>{_value(3)})",
        check=_short_value,
        named=True,
    ),
    # In Chinese, Japanese and Korean text: the name, a particle or a colon, then the value.
    _lower(
        "密码",
        "密碼",
        "口令",
        "パスワード",
        "暗証番号",
        "비밀번호",
        pattern=r"(?:密码|密碼|口令|パスワード|暗証番号|비밀번호)[ \t]*(?:は|が|是|为|為|는|은|:|=)"
        rf"[ \t]*[「『“\"']?{_PLACEHOLDER}(?P<s>[!#-&(-+\x2d-:<-_a-~]{{4,}})",
        check=_unspaced_said,
    ),
    _lower("--", pattern=rf"(?<!-)--[a-z0-9-]{{0,40}}?{_ANY_NAME}[ \t]+{_VALUE}"),
    _lower("<", pattern=rf"<[a-z0-9_:-]{{0,40}}?{_ANY_NAME}>[ \t]*{_PLACEHOLDER}[^<\s]{{4,}}"),
    _lower("bearer", pattern=r"bearer[ \t]+[a-z0-9._~+/=-]{12,}"),
    _lower("basic", pattern=r"basic[ \t]+(?P<b64>[a-z0-9+/]{8,}={0,2})", check=_basic_credentials),
    # Credentials in URLs (only user:password@ is redacted); Azure SAS signatures.
    _lower("://", pattern=r"://(?P<s>[^\s/:@?#\"'`<>]*:[^\s/@?#\"'`<>]+@)"),
    _lower("sig=", pattern=r"[?&]sig=[a-z0-9%+/=]{16,}"),
    # Signed URLs: Google Cloud Storage V4 and AWS presigned (signature, credential, token).
    _lower(
        "x-goog-",
        "x-amz-",
        pattern=r"[?&](?:x-goog-signature|x-goog-credential|x-amz-signature|x-amz-credential"
        r"|x-amz-security-token)=[^&\s\"'`<>]{16,}",
    ),
    # Webhook URLs (their path is the credential): Slack, Discord, Microsoft Teams.
    _lower("hooks.slack.com", pattern=r"https://hooks\.slack\.com/services/[a-z0-9_/]{20,}"),
    _lower(
        "discord",
        pattern=r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d{5,}/[a-z0-9_-]{20,}",
    ),
    _lower(
        "office.com/webhook",
        pattern=r"https://(?:[a-z0-9-]+\.webhook|outlook)\.office\.com/webhook(?:b2)?/"
        r"[^\s\"'`<>]{20,}",
    ),
    # Command lines: curl -u user:password, mysql -pPASSWORD, sshpass -p, docker login -p.
    _lower(
        "curl",
        pattern=rf"curl\b{_CLI}(?:-u|--user)(?:[ \t]+|=)?[\"']?"
        r"(?P<s>[^\s:\"'@]{1,64}:[^\s\"']{3,})",
    ),
    _exact(
        "mysql",
        "mariadb",
        pattern=rf"\b(?:mysql|mariadb)[\w-]*{_CLI}-p{_CLI_SECRET}",
    ),
    _exact("sshpass", pattern=rf"\bsshpass\b{_CLI}-p[ \t]*{_CLI_SECRET}"),
    _exact(
        "login",
        pattern=rf"\b(?:docker|podman|nerdctl|buildah|helm[ \t]+registry)[ \t]+login\b{_CLI}"
        rf"-p[ \t]+{_CLI_SECRET}",
    ),
    # Provider formats (case-sensitive).
    _exact("BEGIN", pattern=_PEM_BEGIN),
    _exact("END", pattern=_PEM_END),
    _token("AKIA", "ASIA", pattern=r"(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    _exact(
        pattern=r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
        check=_aws_secret,
        gate=_long_token,
    ),
    _token(
        "sk_",
        "rk_",
        "whsec_",
        pattern=r"(?:(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{10,}|whsec_[A-Za-z0-9]{20,})",
    ),
    _token("sk-", "pk-", "rk-", pattern=r"(?:sk|pk|rk)-[A-Za-z0-9_-]{20,}"),
    _token("xox", "xapp-", pattern=r"(?:xox[abposre]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,})"),
    _token(
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
    _token(
        "AIza",
        "ya29.",
        "1//0",
        pattern=r"(?:AIza[0-9A-Za-z_-]{30,}|ya29\.[0-9A-Za-z_-]{20,})"
        r"|(?<![\w/])1//0[0-9A-Za-z_-]{30,}",
    ),
    _token(
        "eyJ",
        pattern=r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
    ),
    _token(
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
    _token(":AA", pattern=r"(?<![0-9])[0-9]{8,10}:AA[0-9A-Za-z_-]{33}\b"),  # Telegram bots
    _token(
        "hvs.",
        "hvb.",
        "hvr.",
        "dapi",
        "secret_",
        "ntn_",
        "key-",
        "lin_api_",
        "dp.",
        "ATATT",
        "glsa_",
        "glc_",
        "AGE-SECRET-KEY-1",
        pattern=r"(?<![\w.-])(?:hv[sbr]\.[A-Za-z0-9_-]{24,}"  # Vault
        r"|dapi[0-9a-f]{32}(?:-\d+)?\b"  # Databricks
        r"|secret_[A-Za-z0-9]{43}\b|ntn_[0-9]{11}[A-Za-z0-9]{35}\b"  # Notion
        r"|key-[0-9a-f]{32}\b"  # Mailgun
        r"|lin_api_[A-Za-z0-9]{40}\b"  # Linear
        r"|dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9._-]{40,}"  # Doppler
        r"|ATATT[A-Za-z0-9_=-]{40,}"  # Atlassian
        r"|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}\b|glc_[A-Za-z0-9+/]{32,}={0,2}"  # Grafana
        r"|AGE-SECRET-KEY-1[02-9AC-HJ-NP-Z]{58}\b)",  # age
    ),
    # Azure AD client secrets: three characters, a digit, ``Q~``, then 31-34 more.
    _token(
        "Q~",
        pattern=r"(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}"
        r"(?![A-Za-z0-9_~.-])",
    ),
    # AWS session tokens (STS): base64 of their fixed header.
    _token(
        "FwoGZXIvYXdz",
        "IQoJb3JpZ2lu",
        pattern=r"(?:FwoGZXIvYXdz|IQoJb3JpZ2lu)[A-Za-z0-9+/]{80,}={0,2}",
    ),
    # Base64 of JSON (``{"``, ``{\n``, ``[{"``) that holds a credential, decoded once more.
    _token(
        "eyJ",
        "ewo",
        "W3si",
        pattern=r"(?<![A-Za-z0-9+/_-])(?:eyJ|ewo|W3si)[A-Za-z0-9+/_-]{20,}={0,2}",
        check=_encoded_credential,
    ),
)
_PEM_BEGIN_RE = re.compile(_PEM_BEGIN)
_PEM_END_RE = re.compile(_PEM_END)
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
