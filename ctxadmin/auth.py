"""``Authorization: Bearer <api key>`` authentication for the API."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import authentication, exceptions

from ctxadmin.keys import digest_matches, parse_key
from ctxadmin.models import ApiKey
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


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request)
        if not header:
            return None
        try:
            text = header.decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid API key.") from None
        scheme, _, raw = text.partition(" ")
        if scheme.lower() != self.keyword.lower():
            return None
        raw = raw.strip()
        prefix = parse_key(raw)
        if prefix is None:
            raise exceptions.AuthenticationFailed("Invalid API key.")
        key = ApiKey.objects.select_related("app").filter(prefix=prefix).first()
        # One message for unknown, wrong and revoked keys: nothing to probe.
        if key is None or not digest_matches(raw, key.key_hash) or not key.is_active:
            raise exceptions.AuthenticationFailed("Invalid API key.")
        touch_api_key(key)
        return ApiKeyPrincipal(key), key

    def authenticate_header(self, request):
        return f'{self.keyword} realm="ctxadmin"'
