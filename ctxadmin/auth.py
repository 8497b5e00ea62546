"""``Authorization: Bearer <credential>`` authentication for the API.

The credential is an app's API key, or a *delegated credential*: a narrower one an app hands
out (a tool token is one), bound to one user and session and to a few capabilities. The
ground knows delegated credentials only by ``ctxadmin.delegated``'s interface.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from rest_framework import authentication, exceptions

from ctxadmin.delegated import CredentialEnded, DelegatedCredential, resolvers
from ctxadmin.keys import digest_matches, parse_key
from ctxadmin.models import ApiKey, App
from ctxadmin.services import touch_api_key


@dataclass(frozen=True)
class ApiKeyPrincipal:
    """``request.user`` for a request authenticated by an API key."""

    key: ApiKey
    is_authenticated: bool = True
    is_anonymous: bool = False
    is_staff: bool = False

    @property
    def pk(self):
        return None

    def __str__(self) -> str:
        return f"apikey:{self.key.prefix}"


@dataclass(frozen=True)
class DelegatedPrincipal:
    """``request.user`` for a request authenticated by a delegated credential."""

    credential: DelegatedCredential
    is_authenticated: bool = True
    is_anonymous: bool = False
    is_staff: bool = False

    @property
    def pk(self):
        return None

    def __str__(self) -> str:
        return f"{self.credential.credential_kind}:{self.credential.prefix}"


_KEY_FIELDS = [f.attname for f in ApiKey._meta.concrete_fields]
_APP_FIELDS = [f.attname for f in App._meta.concrete_fields]
_COLUMNS = ", ".join([*(f"k.{n}" for n in _KEY_FIELDS), *(f"a.{n}" for n in _APP_FIELDS)])
_KEY_SQL = (
    f"SELECT {_COLUMNS} FROM ctxadmin_apikey k "  # noqa: S608 - model column names only
    "JOIN ctxadmin_app a ON a.id = k.app_id WHERE k.prefix = %s"
)


def find_key(prefix: str) -> ApiKey | None:
    """The key with its app, in one query. Every API request runs this, so it skips the
    ORM's query building (``Model.from_db`` is how the ORM itself builds rows)."""
    with connection.cursor() as cursor:
        cursor.execute(_KEY_SQL, [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    split = len(_KEY_FIELDS)
    key = ApiKey.from_db(connection.alias, _KEY_FIELDS, row[:split])
    key.app = App.from_db(connection.alias, _APP_FIELDS, row[split:])
    return key


class TokenEnded(exceptions.AuthenticationFailed):
    """A genuine delegated credential that no longer works: a 401 ``token_ended`` saying
    which kind of token it is and why it stopped."""

    code = "token_ended"

    def __init__(self, ended: CredentialEnded) -> None:
        super().__init__(ended.message)
        self.details = {
            "credential": ended.kind,
            "reason": ended.reason,
            "ended_at": ended.ended_at,
        }


def _scheme_problem(scheme: str, has_credential: bool) -> str:
    """What is wrong with an ``Authorization`` header not led by ``Bearer``. The header's
    words are the client's: a scheme is named only when it is a short word, and what may be
    the credential itself is never echoed."""
    fix = "send it as 'Authorization: Bearer <key>'"
    if not has_credential:
        return f"The Authorization header has no scheme before the key: {fix}."
    if scheme.isalpha() and len(scheme) <= 20:
        return f"The Authorization scheme '{scheme}' is not accepted: {fix}."
    return f"The Authorization header does not start with a scheme ctxadmin accepts: {fix}."


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request)
        if not header:
            if request.META.get("HTTP_X_API_KEY"):
                raise exceptions.AuthenticationFailed(
                    "Send the key in the Authorization header as 'Bearer <key>'; "
                    "X-API-Key is not read."
                )
            return None
        try:
            text = header.decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid API key.") from None
        scheme, space, raw = text.strip().partition(" ")
        if scheme.lower() != self.keyword.lower():
            raise exceptions.AuthenticationFailed(_scheme_problem(scheme, bool(space)))
        raw = raw.strip()
        for marker, resolve in resolvers():
            if raw.startswith(marker):
                try:
                    credential = resolve(raw)
                except CredentialEnded as ended:
                    raise TokenEnded(ended) from None
                if credential is None:
                    raise exceptions.AuthenticationFailed("Invalid API key.")
                return DelegatedPrincipal(credential), credential
        prefix = parse_key(raw)
        if prefix is None:
            raise exceptions.AuthenticationFailed("Invalid API key.")
        key = find_key(prefix)
        # One message for unknown, wrong and revoked keys: nothing to probe.
        if key is None or not digest_matches(raw, key.key_hash) or not key.is_active:
            raise exceptions.AuthenticationFailed("Invalid API key.")
        touch_api_key(key)
        return ApiKeyPrincipal(key), key

    def authenticate_header(self, request):
        return f'{self.keyword} realm="ctxadmin"'
