"""Secret pruning (pure; no Django import).

Keys that name credentials are removed at any depth of a JSON value. A key is read as words:
NFKC-normalised (a fullwidth ``password``, U+FF50 …, is ``password``), Unicode format
characters removed (``pass\\u200bword`` is ``password``), then split at separators, camelCase and
digits (``secretAccessKey``, ``X-Api-Key``, ``AWS_SECRET_ACCESS_KEY``, ``oauth2Token`` are
``secret access key``, ``x api key``, ``aws secret access key``, ``oauth 2 token``); a Latin
letter with a diacritic belongs to its word (``contraseña``, ``Lösenord``, ``hasło``). A key
is secret when its words hold:

- a credential word anywhere: ``password(s)``, ``passwd``, ``pwd``, ``pw``, ``pswd``,
  ``passphrase``, ``passcode``, ``passkey``, ``secret(s)``, ``credential(s)``, ``creds``,
  ``dsn``, ``mnemonic``, ``otp``, ``cvv``, ``privkey``, ``xprv``; the session cookies
  ``sessionid``, ``phpsessid``, ``jsessionid``; and non-English ``passwort``,
  ``passwörter``, ``kennwort``, ``contraseña``, ``senha``, ``wachtwoord``, ``lösenord``,
  ``passord``, ``salasana``, ``hasło``, ``heslo``, ``jelszó``, ``пароль``; in scripts written
  without spaces, a word holding ``密码``, ``密碼``, ``口令``, ``密钥``, ``私钥``,
  ``パスワード``, ``暗証番号``, ``秘密鍵`` or ``비밀번호`` (``用户密码``). Glued spellings
  count too: ``dbpassword``, ``clientsecret``, ``PassWord``, ``mot_de_passe``,
  ``one_time_code``, ``2fa_code``, ``mfa_code``, ``KeyMaterial`` (the words joined contain
  ``password``, ``motdepasse``, ``onetimecode``, …); ``pass`` alone (``{"user": …, "pass":
  …}``);
- a credential compound: ``key(s)`` after a qualifier (``api``, ``access``, ``private``,
  ``priv``, ``signing``, ``encryption``, ``master``, ``client``, ``account``,
  ``subscription``, ``session``, ``ssh``, ``tls``, ``ssl``, ``deploy``, … so ``api_key``,
  ``AccountKey``, ``private_key_id``, ``x-functions-key``, ``tls_key``), glued (``apikey``,
  ``accesskey``); ``connection string``, ``conn str``; ``seed phrase``, ``recovery
  phrase``; ``access signature``; a database, broker or webhook ``url``/``uri``
  (``database_url``, ``redis_url``: they carry passwords; ``webhook_url``,
  ``SLACK_WEBHOOK_URL``: the URL is the credential); ``pass`` after a service (``db_pass``,
  ``smtp_pass``); ``recovery``/``backup``/``verification``/``security``/``pin``/``mfa``/
  ``otp`` ``code(s)``; ``magic link``, ``code verifier`` (PKCE), ``client assertion``,
  ``saml response``/``assertion``, ``service_account_json``; ``pat`` after ``github``,
  ``gitlab``, ``personal``, ``azure``, ``devops``; the framework session cookies
  ``laravel_session``, ``ci_session``;
- a weak credential word — ``token(s)`` (also glued: ``csrftoken``, ``accesstoken``),
  ``auth``, ``authorization``, ``authorisation``, ``bearer``, ``cookie(s)``, ``jwt``,
  ``csrf``, ``xsrf`` (``_csrf``) — unless a word after it
  describes it rather than holds it (``token_count``, ``token_type``, ``token_uri``,
  ``auth_uri``, ``cookie_domain``, ``tokens_per_minute``) or, for ``token(s)``, a counting
  word stands before it (``max_tokens``, ``input_tokens``, ``cached_content_token_count``,
  ``x-ratelimit-remaining-tokens``).

Ordinary keys must survive (``tests/secret_tables.py`` holds both tables, which
``tests/ctxadmin/test_secret_detectors.py`` and
``tests/service/leaks/test_secrets_never_leak.py`` run): words are whole, so ``author``,
``authority``, ``keyword``, ``monkey``, ``passage``, ``passport``, ``passenger``,
``secretary``, ``tokenizer``, ``oauth`` are not credential words, nor ``pass`` after another
word (``boarding_pass``, ``bypass``, ``pass_count``). Decided borderline cases:

- pruned: ``auth_config``, ``requested_auth_configs`` (ADK's auth configs hold raw and
  exchanged credentials), ``auth_code``, ``authorization_code``, ``secret_name`` and
  ``secretKeyRef`` (naming a credential is enough: the safe mistake), ``password_policy``,
  ``session_key`` (Django's session key is the cookie's value), ``tokens`` and ``token``
  alone (even where they hold a tokenizer's piece, as in OpenAI logprobs), ``tool_token``
  (ctxadmin's own tool tokens), ``access_key_id`` (half of an AWS credential),
  ``webhook_key``, ``webhook_url`` (kept before: Slack's, Discord's and Teams' webhook URLs
  are their credential), ``PWD`` (also the shell's working directory);
- kept: ``session_id``/``sessionId`` (ADK's, LangGraph's and ctxadmin's own identifier,
  and function-call arguments; only the glued cookie names ``sessionid``, ``PHPSESSID``,
  ``JSESSIONID`` are pruned, so ASP.NET's ``ASP.NET_SessionId`` and Express's
  ``connect.sid`` are missed), ``thought_signature`` (a Gemini thought signature is opaque
  model state, not a credential), ``signature`` and ``x-hub-signature`` (a message's
  signature, not a key), ``function_call.id``, ``key``/``keys`` alone (``{"key": …,
  "value": …}`` pairs), ``public_key``, ``publishable_key``, ``primary_key`` (a database
  column; Azure's ``primaryKey`` is missed with it), ``kms_key_id``, ``idempotency_key``,
  ``cache_key``, ``client_id``, ``auth_uri``, ``auth_type``, ``auth_scheme``, ``token_uri``,
  ``token_type``, ``cookie_domain``, ``usage_metadata`` and every token count of ADK,
  Gemini, OpenAI and Anthropic (``prompt_token_count``, ``max_output_tokens``,
  ``budget_tokens``, ``cache_read_input_tokens``, ``prompt_tokens_details``), ``seed``,
  ``pin``, ``oauth`` (the credentials inside it are pruned), ``author``, ``time_code`` and
  ``timecode`` (a video's), ``code_challenge`` (PKCE's public half), ``csrf_enabled``,
  ``mfa_enabled``, ``2fa_enabled``, ``webhook_id``, ``tls_version``.

Events keep the context JSON computed at their append: one appended before a rule changed
keeps the pruning of its day in later context builds.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Any

from ctxadmin.credentials import REDACTED, looks_like_secret, redact_secret_text

__all__ = [
    "ECHO_CHARS",
    "MAX_ECHOED",
    "REDACTED",
    "echoed",
    "has_secret_keys",
    "is_secret_key",
    "key_words",
    "looks_like_secret",
    "prune_secrets",
    "redact_secret_text",
]

_STRONG = frozenset(
    "password passwords passwd passwds pwd pw pswd passphrase passphrases passcode passcodes"
    " passkey passkeys secret secrets credential credentials creds dsn mnemonic otp totp hotp"
    " cvv cvc sessionid phpsessid jsessionid sessid privkey xprv xpriv passwort kennwort"
    " passwörter contraseña contrasena senha wachtwoord wachtwoorden lösenord losenord passord"
    " salasana hasło haslo heslo jelszó jelszo пароль apikey apikeys basicauth httpauth proxyauth"
    " digestauth".split()
)
# Words of scripts written without spaces (a key is one such word): these inside one.
_UNSPACED = tuple("密码 密碼 口令 密钥 密鑰 私钥 私鑰 パスワード 暗証番号 秘密鍵 비밀번호".split())
# Glued spellings: the words joined contain one of these.
_GLUED = re.compile(
    r"password|passwd|passphrase|credential|apikey|apitoken|accesskey|secretkey|privatekey"
    r"|clientsecret|signingkey|connectionstring|connstr|motdepasse|onetimecode|onetimepassword"
    r"|onetimepin|2facode|mfacode|twofactorcode|keymaterial"
)
_KEY_QUALIFIERS = frozenset(
    "api access secret private signing sign encryption encrypt decryption master client account"
    " storage service subscription app application consumer hmac shared license licence deploy"
    " ssh gpg pgp write admin root sas session crypto aes functions webhook bot user dev"
    " developer auth jwt recovery wallet priv tls ssl".split()
)
_PAIRS = frozenset(
    {
        ("connection", "string"),
        ("connection", "strings"),
        ("conn", "str"),
        ("conn", "string"),
        ("seed", "phrase"),
        ("pass", "phrase"),
        ("access", "signature"),
        ("recovery", "phrase"),
        ("account", "json"),  # service_account_json: a service account's key file
        ("magic", "link"),
        ("magic", "links"),
        ("code", "verifier"),  # PKCE
        ("client", "assertion"),
        ("saml", "response"),
        ("saml", "assertion"),
        ("laravel", "session"),  # session cookies named for their framework
        ("ci", "session"),
        *(
            (word, "pat")  # personal access tokens
            for word in ("github", "gh", "gitlab", "personal", "azure", "ado", "devops")
        ),
        *(
            (word, code)
            for word in ("recovery", "backup", "verification", "security", "pin", "mfa", "otp")
            for code in ("code", "codes")
        ),
    }
)
_URL_HOLDERS = frozenset(
    "database db redis mongo mongodb postgres postgresql pg mysql mariadb amqp broker rabbitmq"
    " jdbc sql sqlalchemy celery webhook webhooks".split()
)
_PASS_HOLDERS = frozenset(
    "db database mysql postgres pg redis smtp mail ftp sftp ssh admin root user ldap proxy"
    " keystore truststore basic http login".split()
)
_WEAK = frozenset(
    "token tokens auth authorization authorisation bearer cookie cookies setcookie jwt jwts"
    " csrf xsrf".split()
)
# After a weak word, these describe it rather than hold it (token_count, auth_uri).
_DESCRIBING = frozenset(
    "type types uri uris url urls endpoint endpoints scheme schemes method methods mode modes"
    " provider providers required enabled disabled enable disable domain path name names"
    " format expiry expires expiration exp expire expired ttl lifetime age count counts limit"
    " limits length len size budget budgets usage estimate estimated used remaining per index"
    " position offset rate ratio details detail id ids hash digest fingerprint prefix suffix"
    " kind field location secure samesite httponly consent policy version threshold".split()
)
# Before token(s), these make it a count (max_tokens, cached_content_token_count).
_COUNTING = frozenset(
    "max min maximum minimum total input output prompt completion completions cached cache"
    " reasoning thoughts thought thinking candidates candidate num n number count audio text"
    " image images video accepted rejected prediction predicted remaining used billed"
    " generated context stop special ratelimit rate limit budget estimated estimate per"
    " average avg".split()
)
# Latin letters with diacritics are letters of the word they stand in (contraseña, Lösenord,
# hasło); other scripts are words of their own (a Cyrillic word after user is a word).
_UP = "A-ZÀ-ÖØ-Þ"
_LOW = "a-zß-öø-ÿĀ-ɏ"
_WORD = re.compile(
    rf"[{_UP}]+(?=[{_UP}][{_LOW}])|[{_UP}]?[{_LOW}]+|[{_UP}]+|\d+|[^\W\d_A-Za-zÀ-ÖØ-öø-ɏ]+"
)


def key_words(name: str) -> tuple[str, ...]:
    """The lowercase words of a key name, as pruning reads them."""
    if not name.isascii():
        name = unicodedata.normalize("NFKC", name)
        name = "".join(ch for ch in name if unicodedata.category(ch) != "Cf")
    return tuple(word.lower() for word in _WORD.findall(name))


def _weak_holds(words: tuple[str, ...], index: int, word: str) -> bool:
    """Whether the weak credential word at ``index`` holds a credential."""
    if any(after in _DESCRIBING for after in words[index + 1 :]):
        return False
    return not (word.startswith("token") and any(w in _COUNTING for w in words[:index]))


def _glued_token(word: str) -> bool:
    """``csrftoken``, ``accesstoken``: a glued word ending in token(s) not led by a count."""
    stem = word[:-1] if word.endswith("tokens") else word
    if not stem.endswith("token") or stem == "token":
        return False
    head = stem[: -len("token")]
    return not any(head.startswith(count) for count in _COUNTING if len(count) > 2)


@lru_cache(maxsize=8192)  # keys repeat across events; pruning runs on every append and build
def is_secret_key(name: str) -> bool:
    words = key_words(name)
    if not words:
        return False
    if _GLUED.search("".join(words)):
        return True
    if words == ("pass",):  # alone (``{"user": …, "pass": …}``); boarding_pass is not
        return True
    previous = ""
    for index, word in enumerate(words):
        if word in _STRONG or word.endswith(("secret", "secrets")):
            return True
        if not word.isascii() and any(unspaced in word for unspaced in _UNSPACED):
            return True
        if word in ("key", "keys") and previous in _KEY_QUALIFIERS:
            return True
        if (previous, word) in _PAIRS:
            return True
        if word in ("url", "uri", "dsn") and previous in _URL_HOLDERS:
            return True
        if word == "pass" and previous in _PASS_HOLDERS:
            return True
        if word in _WEAK or _glued_token(word):
            if _weak_holds(words, index, word):
                return True
        previous = word
    return False


def prune_secrets(value: Any) -> Any:
    """A copy of ``value`` without secret-named keys at any depth (iterative: no recursion
    limit to exhaust on deep input)."""
    if not isinstance(value, dict | list):
        return value
    root: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        source, target = stack.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, child in items:
            if isinstance(source, dict) and is_secret_key(key):
                continue
            if isinstance(child, dict | list):
                copy: Any = {} if isinstance(child, dict) else []
                stack.append((child, copy))
                child = copy
            if isinstance(target, dict):
                target[key] = child
            else:
                target.append(child)
    return root


def has_secret_keys(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                if is_secret_key(key):
                    return True
                stack.append(child)
        elif isinstance(node, list):
            stack.extend(node)
    return False


# ----------------------------------------------------------------------------- echoes

ECHO_CHARS = 64
MAX_ECHOED = 16  # names one error lists at most (unknown query parameters, fields)


def echoed(text: Any, limit: int = ECHO_CHARS) -> str:
    """A client-provided string as an error message may quote it: ``[redacted]`` when it
    looks like a credential, else at most ``limit`` characters (a longer one ends in
    ``…``)."""
    text = text if isinstance(text, str) else repr(text)
    if looks_like_secret(text[:4096]):
        return REDACTED
    return text if len(text) <= limit else text[: limit - 1] + "…"
