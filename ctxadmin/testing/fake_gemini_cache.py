"""A local HTTP server that speaks Gemini's explicit-caching API, for tests and demos.

``FakeGeminiCache`` listens on 127.0.0.1 (an ephemeral port) and serves
``/v1beta/cachedContents`` (create, list, get, ``PATCH ?updateMask=ttl``, delete) and
``/v1beta/models/{model}:generateContent`` with ``cachedContent``, keeping the resources in
memory. Like ``FakeProvider`` it checks every request the way the real API does: a request
the API would refuse gets Google's 400 error envelope and its ``problems`` are recorded, so a
test that asserts ``fake.problems == []`` proves the client speaks the format. Refusals that
depend on the state rather than the format (too small to cache, a gone resource) are answered
as Gemini answers them and are not problems.

A gone resource (deleted, expired, never made) is answered the way Gemini answers it: 403
``PERMISSION_DENIED`` "CachedContent not found (or permission denied)"; ``missing_status=404``
answers 404 ``NOT_FOUND`` instead.

    with FakeGeminiCache(min_tokens=1024) as fake:
        adapter = GeminiCacheAdapter(fake.base_url, fake.api_key)
        fake.fail_next(429, operation="create", retry_after="3")
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ctxadmin.testing.fake_providers import (
    _GEMINI_GENERATION,
    FakeProvider,
    RecordedRequest,
    Reply,
    _encode,
    _error_envelope,
    _gemini_success,
    _Handler,
    _Server,
    json_post,
)

DEFAULT_API_KEY = "fake-gemini-key"
DEFAULT_REPLY_TEXT = '{"ok": true}'
#: Gemini's lifetime for a resource created without ``ttl`` or ``expireTime``.
DEFAULT_TTL = timedelta(hours=1)
MISSING_MESSAGE = "CachedContent not found (or permission denied)"
TOO_SMALL_MESSAGE = "Cached content is too small. total_token_count={}, min_total_token_count={}"
CACHE_CONFLICT_MESSAGE = (
    "CachedContent can not be used with GenerateContent request setting system_instruction, "
    "tools or tool_config.\n\nProposed fix: move those values to CachedContent from "
    "GenerateContent request."
)
OPERATIONS = frozenset({"create", "list", "get", "update_ttl", "delete", "generate"})

_COLLECTION = "/v1beta/cachedContents"
_RESOURCE_PATH = re.compile(r"/v1beta/cachedContents/(?P<id>[A-Za-z0-9_-]+)")
_GENERATE_PATH = re.compile(r"/v1beta/models/(?P<model>[A-Za-z0-9._-]+):generateContent")
_NAME = re.compile(r"cachedContents/[A-Za-z0-9_-]+")
_DURATION = re.compile(r"\d{1,12}(\.\d{1,9})?s")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")
_CREATE_FIELDS = frozenset(
    {
        "model",
        "systemInstruction",
        "contents",
        "tools",
        "toolConfig",
        "ttl",
        "expireTime",
        "displayName",
    }
)
_UPDATE_FIELDS = frozenset({"name", "ttl", "expireTime"})
_GENERATE_FIELDS = frozenset(
    {
        "contents",
        "systemInstruction",
        "generationConfig",
        "safetySettings",
        "tools",
        "toolConfig",
        "cachedContent",
    }
)
_DATA_PART_KEYS = frozenset(
    {
        "text",
        "inlineData",
        "fileData",
        "functionCall",
        "functionResponse",
        "executableCode",
        "codeExecutionResult",
    }
)
_PART_KEYS = _DATA_PART_KEYS | {"thought", "thoughtSignature", "videoMetadata"}
_TOOL_KEYS = frozenset(
    {
        "functionDeclarations",
        "googleSearch",
        "googleSearchRetrieval",
        "codeExecution",
        "urlContext",
        "fileSearch",
        "googleMaps",
        "computerUse",
    }
)
_TOOL_CONFIG_KEYS = frozenset({"functionCallingConfig", "retrievalConfig"})
_MAX_PAGE_SIZE = 1000


@dataclass
class CachedRecord:
    """One resource as the server keeps it (what a create sent, plus what it computed)."""

    name: str
    model: str
    display_name: str
    token_count: int
    create_time: datetime
    update_time: datetime
    expire_time: datetime
    system_instruction: dict | None = None
    contents: list = field(default_factory=list)
    tools: list = field(default_factory=list)
    tool_config: dict | None = None
    seq: int = 0

    def resource(self) -> dict[str, Any]:
        """The ``CachedContent`` Gemini returns (metadata only: no cached members)."""
        return {
            "name": self.name,
            "model": self.model,
            "createTime": _rfc3339(self.create_time),
            "updateTime": _rfc3339(self.update_time),
            # Gemini gives expiry in nanoseconds; the other times in microseconds.
            "expireTime": _rfc3339(self.expire_time, nanos=True),
            "displayName": self.display_name,
            "usageMetadata": {"totalTokenCount": self.token_count},
        }


@dataclass
class _Injection:
    operation: str | None
    reply: Reply
    remaining: int


def estimate_tokens(members: dict[str, Any]) -> int:
    """The server's token count for a cache: bytes of the canonical JSON of its
    ``systemInstruction``, ``contents`` and ``tools``, over four."""
    size = sum(
        len(_canonical(members[key]))
        for key in ("systemInstruction", "contents", "tools")
        if members.get(key) is not None
    )
    return size // 4


class FakeGeminiCache:
    """Gemini's ``cachedContents`` and cached ``generateContent``, in memory.

    Counters (``creates``, ``deletes``, ``patches``, ``generates``, ``gets``, ``lists``)
    count requests that passed the key and format checks, whatever they were answered.
    ``min_tokens`` refuses smaller creates as Gemini does; ``create_delay_s`` delays the
    reply to a create (the resource is made at the end of the delay, so a client that gave
    up still leaves one behind); ``hold_creates()`` keeps creates open until
    ``release_creates()``; ``fail_next`` makes the next requests fail; ``list_page_size``
    bounds a list page.
    """

    def __init__(
        self,
        *,
        api_key: str | None = DEFAULT_API_KEY,
        min_tokens: int = 0,
        create_delay_s: float = 0.0,
        list_page_size: int = 100,
        missing_status: int = 403,
        reply_text: str = DEFAULT_REPLY_TEXT,
    ):
        if missing_status not in {403, 404}:
            raise ValueError("missing_status must be 403 (as Gemini answers) or 404")
        if list_page_size < 1:
            raise ValueError("list_page_size must be positive")
        self.api_key = api_key
        self.min_tokens = min_tokens
        self.create_delay_s = create_delay_s
        self.list_page_size = list_page_size
        self.missing_status = missing_status
        self.reply_text = reply_text
        self.creates = self.deletes = self.patches = self.generates = 0
        self.gets = self.lists = 0
        self._records: dict[str, CachedRecord] = {}
        self._seq = 0
        self._requests: list[RecordedRequest] = []
        self._injections: list[_Injection] = []
        self._held = 0
        self._gate = threading.Event()
        self._gate.set()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeGeminiCache:
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", 0), _CacheHandler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-gemini-cache",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; delayed and held creates are abandoned, not waited for."""
        self._stopping.set()
        self._gate.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeGeminiCache:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake Gemini cache is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # ------------------------------------------------------------------ state and knobs

    @property
    def resources(self) -> dict[str, CachedRecord]:
        """The live (unexpired) resources by name; copies."""
        with self._lock:
            self._purge()
            return {name: replace(record) for name, record in self._records.items()}

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def problems(self) -> list[str]:
        return [problem for request in self.requests for problem in request.problems]

    def expire(self, name: str) -> None:
        """Make the resource expire now, as if its TTL had run out."""
        with self._lock:
            self._records[name].expire_time = _now() - timedelta(microseconds=1)

    def fail_next(
        self,
        status: int,
        count: int = 1,
        *,
        operation: str | None = None,
        retry_after: str | None = None,
        message: str = "fake failure",
    ) -> None:
        """Answer the next ``count`` requests of ``operation`` (any when None) with
        ``status`` in Google's error envelope (a 429 also carries ``RetryInfo``)."""
        envelope = _error_envelope("gemini", status, message)
        headers = {}
        if retry_after is not None:
            headers["retry-after"] = retry_after
            if status == 429:
                envelope["error"]["details"] = [
                    {
                        "@type": "type.googleapis.com/google.rpc.RetryInfo",
                        "retryDelay": f"{retry_after}s",
                    }
                ]
        self.reply_next(Reply(status, _encode(envelope), headers), count, operation=operation)

    def reply_next(self, reply: Reply, count: int = 1, *, operation: str | None = None) -> None:
        """Answer the next ``count`` requests of ``operation`` (any when None) with ``reply``."""
        if operation is not None and operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; known: {sorted(OPERATIONS)}")
        if count < 1:
            raise ValueError("count must be positive")
        with self._lock:
            self._injections.append(_Injection(operation, reply, count))

    def hold_creates(self) -> None:
        """Keep every create open (before anything is made) until ``release_creates``."""
        self._gate.clear()

    def release_creates(self) -> None:
        self._gate.set()

    @property
    def held(self) -> int:
        """How many creates are being held open now."""
        with self._lock:
            return self._held

    def wait_until_held(self, count: int = 1, timeout_s: float = 5.0) -> bool:
        """Wait until at least ``count`` creates are held; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._held >= count, timeout=timeout_s)

    # ------------------------------------------------------------------ serving

    #: How a refused request's error message begins.
    refusal = "fake Gemini cache refused the request: "

    def _handle(self, handler: _Handler) -> None:
        length = handler.headers.get("content-length")
        body = handler.rfile.read(int(length)) if length and length.isdigit() else b""
        parts = urlsplit(handler.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        headers = {key.lower(): value for key, value in handler.headers.items()}
        method = handler.command
        operation, match = _route(method, parts.path)
        parsed, problems = self._check(operation, method, match, headers, query, body)
        request = RecordedRequest(method, parts.path, parts.query, headers, body, tuple(problems))
        with self._lock:
            self._requests.append(request)
        refused = FakeProvider("gemini", api_key=self.api_key)._refuse_key(headers)
        if refused is not None:
            reply = refused
        elif problems:
            reply = _error(400, self.refusal + "; ".join(problems))
        else:
            reply = self._serve(operation, match, query, parsed)
            if reply is None:
                return  # stopping: abandon the request
        self._send(handler, reply)

    def _serve(
        self, operation: str, match: re.Match | None, query: dict, body: dict | None
    ) -> Reply | None:
        counter = {
            "create": "creates",
            "delete": "deletes",
            "update_ttl": "patches",
            "generate": "generates",
            "get": "gets",
            "list": "lists",
        }[operation]
        with self._lock:
            setattr(self, counter, getattr(self, counter) + 1)
            injected = self._take_injection(operation)
        if injected is not None:
            return injected
        if operation == "create":
            return self._create(body or {})
        if operation == "list":
            return self._list(query)
        assert match is not None
        if operation == "generate":
            return self._generate(match["model"], body or {})
        name = f"cachedContents/{match['id']}"
        if operation == "get":
            return self._get(name)
        if operation == "update_ttl":
            return self._update(name, body or {})
        return self._delete(name)

    def _take_injection(self, operation: str) -> Reply | None:
        for injection in self._injections:
            if injection.operation in (None, operation):
                injection.remaining -= 1
                if injection.remaining == 0:
                    self._injections.remove(injection)
                return injection.reply
        return None

    def _missing(self) -> Reply:
        if self.missing_status == 404:
            return _error(404, "Requested entity was not found.")
        return _error(403, MISSING_MESSAGE)

    def _purge(self) -> None:
        now = _now()
        for name in [n for n, r in self._records.items() if r.expire_time <= now]:
            del self._records[name]

    def _live(self, name: str | None) -> CachedRecord | None:
        self._purge()
        return self._records.get(name) if name else None

    # ------------------------------------------------------------------ operations

    def _create(self, body: dict) -> Reply | None:
        if not self._gate.is_set():
            with self._changed:
                self._held += 1
                self._changed.notify_all()
            try:
                while not self._gate.wait(0.05):
                    pass
            finally:
                with self._changed:
                    self._held -= 1
                    self._changed.notify_all()
        if self._stopping.is_set():
            return None
        if self.create_delay_s and self._stopping.wait(self.create_delay_s):
            return None
        tokens = estimate_tokens(body)
        if tokens < self.min_tokens:
            return _error(400, TOO_SMALL_MESSAGE.format(tokens, self.min_tokens))
        now = _now()
        if "expireTime" in body:
            expire_time = _parse_time(body["expireTime"])
        else:
            expire_time = now + (_parse_duration(body["ttl"]) if "ttl" in body else DEFAULT_TTL)
        with self._lock:
            self._seq += 1
            record = CachedRecord(
                name=f"cachedContents/{secrets.token_hex(16)}",
                model=body["model"],
                display_name=body.get("displayName", ""),
                token_count=tokens,
                create_time=now,
                update_time=now,
                expire_time=expire_time,
                system_instruction=body.get("systemInstruction"),
                contents=body.get("contents", []),
                tools=body.get("tools", []),
                tool_config=body.get("toolConfig"),
                seq=self._seq,
            )
            self._records[record.name] = record
            return _ok(record.resource())

    def _list(self, query: dict) -> Reply:
        size = min(int(query.get("pageSize", [self.list_page_size])[0]), self.list_page_size)
        token = query.get("pageToken", [""])[0]
        after = int(token[1:]) if token else 0
        with self._lock:
            self._purge()
            live = sorted((r for r in self._records.values() if r.seq > after), key=lambda r: r.seq)
            page = live[:size]
            envelope: dict[str, Any] = {}
            if page:
                envelope["cachedContents"] = [record.resource() for record in page]
            if len(live) > size:
                envelope["nextPageToken"] = f"p{page[-1].seq}"
        return _ok(envelope)

    def _get(self, name: str) -> Reply:
        with self._lock:
            record = self._live(name)
            return _ok(record.resource()) if record else self._missing()

    def _update(self, name: str, body: dict) -> Reply:
        now = _now()
        with self._lock:
            record = self._live(name)
            if record is None:
                return self._missing()
            if "ttl" in body:
                record.expire_time = now + _parse_duration(body["ttl"])
            else:
                record.expire_time = _parse_time(body["expireTime"])
            record.update_time = now
            return _ok(record.resource())

    def _delete(self, name: str) -> Reply:
        with self._lock:
            if self._live(name) is None:
                return self._missing()
            del self._records[name]
        return _ok({})

    def _generate(self, model: str, body: dict) -> Reply:
        cached_name = body.get("cachedContent")
        cached = 0
        if cached_name is not None:
            with self._lock:
                record = self._live(cached_name)
                if record is None:
                    return self._missing()
                cached = record.token_count
        prompt = cached + estimate_tokens({"contents": body.get("contents")})
        envelope = _gemini_success(self.reply_text, model, prompt, len(self.reply_text) // 4, None)
        if cached_name is not None:
            envelope["usageMetadata"]["cachedContentTokenCount"] = cached
            envelope["usageMetadata"]["cacheTokensDetails"] = [
                {"modality": "TEXT", "tokenCount": cached}
            ]
        return _ok(envelope)

    # ------------------------------------------------------------------ request checks

    def _check(
        self,
        operation: str | None,
        method: str,
        match: re.Match | None,
        headers: dict[str, str],
        query: dict[str, list[str]],
        body: bytes,
    ) -> tuple[dict | None, list[str]]:
        """(the JSON body, what the real API would refuse in this request)."""
        if operation is None:
            return None, [f"no {method} method at this path"]
        problems: list[str] = []
        if "authorization" in headers:
            problems.append("Gemini API keys go in x-goog-api-key, not Authorization")
        parsed: dict | None = None
        if operation in {"create", "generate", "update_ttl"}:
            parsed, json_problems = json_post("POST", headers, body)
            problems += json_problems
        elif body:
            problems.append(f"a {method} request has no body")
        if operation == "create" and parsed is not None:
            _check_create(parsed, problems)
        elif operation == "list":
            self._check_list(query, problems)
        elif operation == "update_ttl" and parsed is not None:
            _check_update(query, parsed, problems)
        elif operation == "generate" and parsed is not None and match is not None:
            self._check_generate(match["model"], parsed, problems)
        return parsed, problems

    def _check_list(self, query: dict[str, list[str]], problems: list[str]) -> None:
        if query.keys() - {"pageSize", "pageToken"}:
            unknown = sorted(query.keys() - {"pageSize", "pageToken"})
            problems.append(f"unknown query parameters {unknown}")
        size = query.get("pageSize", ["1"])
        if len(size) != 1 or not size[0].isdigit() or not 1 <= int(size[0]) <= _MAX_PAGE_SIZE:
            problems.append(f"pageSize must be an integer from 1 to {_MAX_PAGE_SIZE}")
        token = query.get("pageToken")
        if token is not None and not (
            len(token) == 1 and (token[0] == "" or re.fullmatch(r"p\d+", token[0]))
        ):
            problems.append("pageToken is not one this server gave")

    def _check_generate(self, model: str, body: dict, problems: list[str]) -> None:
        if body.keys() - _GENERATE_FIELDS:
            problems.append(f"unknown body fields {sorted(body.keys() - _GENERATE_FIELDS)}")
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            problems.append("contents must be a non-empty array")
        else:
            _check_contents(contents, "contents", problems)
        config = body.get("generationConfig")
        if config is not None and (
            not isinstance(config, dict) or config.keys() - _GEMINI_GENERATION
        ):
            problems.append("generationConfig must be an object of known fields")
        name = body.get("cachedContent")
        if name is None:
            return
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            problems.append("cachedContent must be a cachedContents/{id} name")
            return
        if {"systemInstruction", "tools", "toolConfig"} & body.keys():
            problems.append(CACHE_CONFLICT_MESSAGE)
        with self._lock:
            record = self._live(name)
        if record is not None and record.model != f"models/{model}":
            problems.append(
                "Model used by GenerateContent request and CachedContent has to be the same."
            )

    def _send(self, handler: _Handler, reply: Reply) -> None:
        try:
            handler.send_response(reply.status)
            handler.send_header("content-type", reply.content_type)
            payload = reply.body if isinstance(reply.body, bytes) else b""
            handler.send_header("content-length", str(len(payload)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(payload)
        except ConnectionError:
            pass  # the client gave up (deadline): nothing left to answer


class _CacheHandler(_Handler):
    do_PATCH = _Handler.do_POST


# --------------------------------------------------------------------------- helpers


def _route(method: str, path: str) -> tuple[str | None, re.Match | None]:
    if path == _COLLECTION:
        return {"POST": "create", "GET": "list"}.get(method), None
    match = _RESOURCE_PATH.fullmatch(path)
    if match:
        operation = {"GET": "get", "PATCH": "update_ttl", "DELETE": "delete"}.get(method)
        return operation, match if operation else None
    match = _GENERATE_PATH.fullmatch(path)
    if match and method == "POST":
        return "generate", match
    return None, None


def _check_create(body: dict, problems: list[str]) -> None:
    if body.keys() - _CREATE_FIELDS:
        problems.append(f"unknown body fields {sorted(body.keys() - _CREATE_FIELDS)}")
    model = body.get("model")
    if not isinstance(model, str) or not model.startswith("models/") or model == "models/":
        problems.append("model must be models/{model}")
    if "ttl" in body and "expireTime" in body:
        problems.append("ttl and expireTime are exclusive")
    _check_expiration(body, problems)
    if "contents" in body:
        _check_contents(body["contents"], "contents", problems)
    system = body.get("systemInstruction")
    if system is not None and not (
        isinstance(system, dict)
        and not system.keys() - {"parts", "role"}
        and isinstance(system.get("parts"), list)
        and system["parts"]
        and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in system["parts"])
    ):
        problems.append("systemInstruction must be {parts: [{text}]}")
    tools = body.get("tools")
    if tools is not None and not (
        isinstance(tools, list)
        and all(isinstance(t, dict) and t and not t.keys() - _TOOL_KEYS for t in tools)
    ):
        problems.append("tools must be [{functionDeclarations | googleSearch | ...}]")
    config = body.get("toolConfig")
    if config is not None and not (
        isinstance(config, dict) and not config.keys() - _TOOL_CONFIG_KEYS
    ):
        problems.append("toolConfig must be {functionCallingConfig?, retrievalConfig?}")
    display = body.get("displayName")
    if display is not None and not (isinstance(display, str) and len(display) <= 128):
        problems.append("displayName must be a string of at most 128 characters")


def _check_update(query: dict[str, list[str]], body: dict, problems: list[str]) -> None:
    masks = query.get("updateMask")
    if query.keys() - {"updateMask"}:
        problems.append(f"unknown query parameters {sorted(query.keys() - {'updateMask'})}")
    fields = masks[0].split(",") if masks and len(masks) == 1 else []
    if not fields or set(fields) - {"ttl", "expireTime"} or len(fields) != 1:
        problems.append("updateMask must be ttl or expireTime")
    if body.keys() - _UPDATE_FIELDS:
        problems.append(f"unknown body fields {sorted(body.keys() - _UPDATE_FIELDS)}")
    if "ttl" in body and "expireTime" in body:
        problems.append("ttl and expireTime are exclusive")
    for mask in fields:
        if mask not in body:
            problems.append(f"updateMask names {mask} but the body has none")
    _check_expiration(body, problems)


def _check_expiration(body: dict, problems: list[str]) -> None:
    ttl = body.get("ttl")
    if ttl is not None and not (isinstance(ttl, str) and _DURATION.fullmatch(ttl)):
        problems.append('ttl must be a Duration string such as "300s" or "1.5s"')
    expire = body.get("expireTime")
    if expire is not None and not (isinstance(expire, str) and _TIMESTAMP.fullmatch(expire)):
        problems.append("expireTime must be an RFC 3339 timestamp")


def _check_contents(contents: Any, where: str, problems: list[str]) -> None:
    if not isinstance(contents, list):
        problems.append(f"{where} must be an array")
        return
    for content in contents:
        parts = content.get("parts") if isinstance(content, dict) else None
        if not (
            isinstance(content, dict)
            and not content.keys() - {"role", "parts"}
            and content.get("role") in {"user", "model"}
            and isinstance(parts, list)
            and parts
            and all(_valid_part(part) for part in parts)
        ):
            problems.append(f"{where} must be [{{role: user|model, parts: [part]}}]")
            return


def _valid_part(part: Any) -> bool:
    return (
        isinstance(part, dict)
        and not part.keys() - _PART_KEYS
        and len(part.keys() & _DATA_PART_KEYS) == 1
        and ("text" not in part or isinstance(part["text"], str))
    )


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _now() -> datetime:
    return datetime.now(UTC)


def _rfc3339(when: datetime, *, nanos: bool = False) -> str:
    text = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return text + ("000Z" if nanos else "Z")


def _parse_duration(value: str) -> timedelta:
    return timedelta(seconds=float(Decimal(value[:-1])))


def _parse_time(value: str) -> datetime:
    match = re.fullmatch(r"(.*?)(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})", value)
    assert match is not None
    base, fraction, zone = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    zone = "+00:00" if zone == "Z" else zone
    return datetime.fromisoformat(f"{base}.{micros}{zone}").astimezone(UTC)


def _ok(envelope: dict) -> Reply:
    return Reply(200, _encode(envelope))


def _error(status: int, message: str) -> Reply:
    return Reply(status, _encode(_error_envelope("gemini", status, message)))
