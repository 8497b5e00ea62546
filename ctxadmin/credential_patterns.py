"""The patterns of the credential detector (pure; no Django import): the credential names and
their families, the value and assignment shapes, and the table of detectors, each an anchor
to find cheaply and a pattern (with a check) to confirm. ``ctxadmin.credentials`` runs them;
its docstring says what they find and why they are our own.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

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


# A private key's armour, also split by a newline (text parts joined; ``\n`` escaped, as
# in JSON) or with dashes missing; BEGIN takes the block, END alone the base64 lines before it.
_WS = r"(?:[ \t\r\n]|\\[nrt])"
_PEM_NAME = rf"(?:[A-Z0-9]+{_WS}+){{0,4}}?PRIVATE{_WS}+KEY(?:{_WS}+BLOCK)?"
_PEM_BEGIN = rf"-{{2,}}{_WS}*BEGIN{_WS}+{_PEM_NAME}"
_PEM_END = rf"-{{2,}}{_WS}*END{_WS}+{_PEM_NAME}[ \t]*-*"
_CLI = r"(?:[ \t]++\S++){0,12}?[ \t]+"  # up to 12 arguments before the flag
_CLI_SECRET = _PLACEHOLDER + r"""(?P<s>'[^'\n]{3,}'|"[^"\n]{3,}"|[^\s"'-][^\s"']{2,})"""

#: Every detector but the one that decodes base64 and runs them all again
#: (``ctxadmin.credentials`` adds it).
PATTERN_DETECTORS: tuple[Detector, ...] = (
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
)
_PEM_BEGIN_RE = re.compile(_PEM_BEGIN)
_PEM_END_RE = re.compile(_PEM_END)
