"""Local HTTP servers that speak a model provider's wire format, for tests and benchmarks.

``FakeProvider(kind)`` listens on 127.0.0.1 (an ephemeral port) and answers each request with
the next scripted ``Reply``, then with ``responder`` if one is set, else with a small JSON
success. It checks every request against the real API's shape (path, key header, body
fields) the way the provider would: a request that the real API would refuse gets the
provider's own 400 error and its ``problems`` are recorded, so a test that asserts
``fake.problems == []`` proves the client speaks the format.

    with FakeProvider("gemini") as fake:
        fake.script(fake.success('{"summary": "..."}'), fake.error(429, retry_after="3"))
        complete_json(fake.connection(), model="gemini-2.5-flash", ...)

Both JSON-output requests (``complete_json``) and tool-calling requests (``generate``) are
checked: tool declarations, function call and response turns and how they pair, and
Gemini's ``cachedContent``. ``function_call(...)`` scripts a reply in which the model calls
a tool.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from ctxadmin.providers.base import (
    DEFAULT_MAX_OUTPUT_BYTES,
    KINDS,
    ProviderConnection,
    ProviderKind,
)

DEFAULT_TEXT = '{"ok": true}'
# ``connection(api_key=...)`` default: the server's own key (None is a meaningful choice).
_SERVER_KEY: Any = object()


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it; header names are lower-case."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    problems: tuple[str, ...]

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    @property
    def model(self) -> str | None:
        """The model asked for: in the path for Gemini, in the body for the others."""
        match = _GEMINI_PATH.fullmatch(self.path)
        if match:
            return match.group("model")
        body = self.json
        return body.get("model") if isinstance(body, dict) else None


@dataclass
class Reply:
    """What the server sends. ``body`` may depend on the request (to echo the model)."""

    status: int = 200
    body: bytes | Callable[[RecordedRequest], bytes] = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    # False: no Content-Length, the body ends when the connection closes.
    send_length: bool = True
    content_type: str = "application/json"


class FakeProvider:
    """A provider endpoint of one ``kind`` with scripted replies and a request log.

    ``api_key`` is the key the server expects (a missing or wrong one is refused the way the
    provider refuses it); None makes a keyless server, like a local vLLM or Ollama.
    """

    def __init__(
        self,
        kind: ProviderKind,
        *,
        api_key: str | None = "fake-provider-key",
        responder: Callable[[RecordedRequest], Reply] | None = None,
    ):
        if kind not in KINDS:
            raise ValueError(f"unknown provider kind {kind!r}")
        self.kind = kind
        self.api_key = api_key
        self.responder = responder
        self._replies: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._call_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeProvider:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-{self.kind}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; replies still sleeping are abandoned, not waited for."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake provider is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def connection(
        self,
        *,
        name: str = "fake",
        base_url: str | None = None,
        api_key: str | None = _SERVER_KEY,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> ProviderConnection:
        """A connection to this server, with its key unless another (or None) is given."""
        return ProviderConnection(
            name=name,
            kind=self.kind,
            base_url=base_url or self.base_url,
            api_key=self.api_key if api_key is _SERVER_KEY else api_key,
            max_output_bytes=max_output_bytes,
        )

    # ------------------------------------------------------------------ script and log

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one."""
        with self._lock:
            self._replies.extend(replies)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def problems(self) -> list[str]:
        return [problem for request in self.requests for problem in request.problems]

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        if self.responder is not None:
            return self.responder(request)
        return self.default_reply()

    def default_reply(self) -> Reply:
        """The answer when nothing is scripted and no responder is set."""
        return self.success(DEFAULT_TEXT)

    # ------------------------------------------------------------------ replies

    def success(
        self,
        text: str,
        *,
        input_tokens: int = 11,
        output_tokens: int = 7,
        finish_reason: str | None = None,
        delay_s: float = 0.0,
        cached_tokens: int | None = None,
    ) -> Reply:
        """A successful reply in this kind's format, carrying ``text``; echoes the model.

        ``cached_tokens`` reports that many prompt tokens as read from the provider's cache
        (Gemini ``cachedContentTokenCount``, OpenAI ``prompt_tokens_details.cached_tokens``,
        Anthropic ``cache_read_input_tokens``).
        """
        kind = self.kind

        def body(request: RecordedRequest) -> bytes:
            model = request.model or "fake-model"
            if kind == "gemini":
                envelope = _gemini_success(text, model, input_tokens, output_tokens, finish_reason)
            elif kind == "openai_compatible":
                envelope = _openai_success(text, model, input_tokens, output_tokens, finish_reason)
            else:
                envelope = _anthropic_success(
                    text, model, input_tokens, output_tokens, finish_reason
                )
            return _encode(_with_cached_tokens(kind, envelope, cached_tokens))

        return Reply(200, body, delay_s=delay_s)

    def function_call(
        self,
        name: str,
        args: dict[str, Any],
        *,
        call_id: str | None = None,
        text: str | None = None,
        input_tokens: int = 11,
        output_tokens: int = 7,
        cached_tokens: int | None = None,
        finish_reason: str | None = None,
        delay_s: float = 0.0,
    ) -> Reply:
        """A reply in which the model calls ``name`` with ``args`` (after ``text``, if given).

        Without ``call_id``, OpenAI and Anthropic replies get a fresh id of their own style
        (``call_…``, ``toolu_…``) and a Gemini reply has none, as the Gemini API sends it.
        """
        return self.function_calls(
            [(name, args, call_id)],
            text=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached_tokens,
            finish_reason=finish_reason,
            delay_s=delay_s,
        )

    def function_calls(
        self,
        calls: list[tuple[str, dict[str, Any], str | None]],
        *,
        text: str | None = None,
        input_tokens: int = 11,
        output_tokens: int = 7,
        cached_tokens: int | None = None,
        finish_reason: str | None = None,
        delay_s: float = 0.0,
    ) -> Reply:
        """A reply with several (parallel) calls, each ``(name, args, call_id or None)``."""
        kind = self.kind
        with self._lock:
            numbered = [
                (name, args, call_id, next(self._call_ids)) for name, args, call_id in calls
            ]
        if kind == "openai_compatible":
            named = [(n, a, i or f"call_fake{k}") for n, a, i, k in numbered]
        elif kind == "anthropic":
            named = [(n, a, i or f"toolu_fake{k}") for n, a, i, k in numbered]
        else:
            named = [(n, a, i) for n, a, i, _ in numbered]

        def body(request: RecordedRequest) -> bytes:
            model = request.model or "fake-model"
            builder = {
                "gemini": _gemini_function_calls,
                "openai_compatible": _openai_function_calls,
            }.get(kind, _anthropic_function_calls)
            envelope = builder(named, text, model, input_tokens, output_tokens, finish_reason)
            return _encode(_with_cached_tokens(kind, envelope, cached_tokens))

        return Reply(200, body, delay_s=delay_s)

    def error(self, status: int, message: str = "fake error", *, retry_after: str | None = None):
        """The provider's own error envelope for ``status``."""
        headers = {"retry-after": retry_after} if retry_after is not None else {}
        return Reply(status, _encode(_error_envelope(self.kind, status, message)), headers)

    def blocked(self, reason: str = "SAFETY") -> Reply:
        """Gemini's answer to a prompt its safety filters refused: no candidates at all."""
        if self.kind != "gemini":
            raise ValueError("only Gemini reports a blocked prompt this way")
        envelope = {
            "promptFeedback": {
                "blockReason": reason,
                "safetyRatings": [
                    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}
                ],
            },
            "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
            "modelVersion": "fake-model",
        }
        return Reply(200, _encode(envelope))

    @staticmethod
    def raw(
        body: bytes,
        *,
        status: int = 200,
        content_type: str = "application/json",
        send_length: bool = True,
        delay_s: float = 0.0,
    ) -> Reply:
        return Reply(
            status, body, delay_s=delay_s, send_length=send_length, content_type=content_type
        )

    def _refuse_key(self, headers: dict[str, str]) -> Reply | None:
        """The provider's answer to a missing or wrong key (None: accepted, or keyless)."""
        if self.api_key is None:
            return None
        if self.kind == "gemini":
            given = headers.get("x-goog-api-key")
            if given is None:
                return self.error(403, "Method doesn't allow unregistered callers.")
            if given != self.api_key:
                # Gemini answers a bad key with 400; only the reason tells it apart.
                message = "API key not valid. Please pass a valid API key."
                envelope = _error_envelope("gemini", 400, message)
                envelope["error"]["details"] = [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID",
                        "domain": "googleapis.com",
                    }
                ]
                return Reply(400, _encode(envelope))
            return None
        if self.kind == "openai_compatible":
            if headers.get("authorization") != f"Bearer {self.api_key}":
                return self.error(401, "Incorrect API key provided.")
            return None
        if headers.get("x-api-key") != self.api_key:
            return self.error(401, "invalid x-api-key")
        return None

    # ------------------------------------------------------------------ serving

    #: How a refused request's error message begins.
    refusal = "fake provider refused the request: "

    def check(self, method: str, path: str, headers: dict[str, str], body: bytes) -> list[str]:
        """What the real API would refuse in this request (empty: nothing)."""
        return check_request(self.kind, method, path, headers, body)

    def _handle(self, handler: _Handler) -> None:
        length = handler.headers.get("content-length")
        body = handler.rfile.read(int(length)) if length and length.isdigit() else b""
        parts = urlsplit(handler.path)
        headers = {key.lower(): value for key, value in handler.headers.items()}
        problems = tuple(self.check(handler.command, parts.path, headers, body))
        request = RecordedRequest(handler.command, parts.path, parts.query, headers, body, problems)
        with self._lock:
            self._requests.append(request)
        refused = self._refuse_key(headers)
        if refused is not None:
            reply = refused
        elif problems:
            reply = self.error(400, self.refusal + "; ".join(problems))
        else:
            reply = self._next_reply(request)
        if reply.delay_s and self._stopping.wait(reply.delay_s):
            return
        payload = reply.body(request) if callable(reply.body) else reply.body
        try:
            handler.send_response(reply.status)
            handler.send_header("content-type", reply.content_type)
            if reply.send_length:
                handler.send_header("content-length", str(len(payload)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(payload)
        except ConnectionError:
            pass  # the client gave up (deadline, size cap): nothing left to answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeProvider

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up mid-reply are expected here; stay quiet about them."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        self.server.fake._handle(self)

    do_GET = do_PUT = do_DELETE = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        pass


# --------------------------------------------------------------------------- envelopes


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8")


def _gemini_success(
    text: str, model: str, input_tokens: int, output_tokens: int, finish: str | None
) -> dict:
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": finish or "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": input_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": input_tokens + output_tokens,
        },
        "modelVersion": model,
        "responseId": "fake-response",
    }


def _openai_success(
    text: str, model: str, input_tokens: int, output_tokens: int, finish: str | None
) -> dict:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": finish or "stop",
            }
        ],
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        },
    }


def _anthropic_success(
    text: str, model: str, input_tokens: int, output_tokens: int, finish: str | None
) -> dict:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": finish or "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def _gemini_function_calls(
    calls: list[tuple[str, dict, str | None]],
    text: str | None,
    model: str,
    input_tokens: int,
    output_tokens: int,
    finish: str | None,
) -> dict:
    envelope = _gemini_success(text or "", model, input_tokens, output_tokens, finish)
    parts: list[dict] = [{"text": text}] if text else []
    for name, args, call_id in calls:
        call: dict[str, Any] = {"name": name, "args": args}
        if call_id is not None:
            call = {"id": call_id, **call}
        parts.append({"functionCall": call})
    envelope["candidates"][0]["content"]["parts"] = parts
    return envelope


def _openai_function_calls(
    calls: list[tuple[str, dict, str | None]],
    text: str | None,
    model: str,
    input_tokens: int,
    output_tokens: int,
    finish: str | None,
) -> dict:
    envelope = _openai_success(text or "", model, input_tokens, output_tokens, finish)
    choice = envelope["choices"][0]
    choice["message"]["content"] = text or None
    choice["message"]["tool_calls"] = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for name, args, call_id in calls
    ]
    choice["finish_reason"] = finish or "tool_calls"
    return envelope


def _anthropic_function_calls(
    calls: list[tuple[str, dict, str | None]],
    text: str | None,
    model: str,
    input_tokens: int,
    output_tokens: int,
    finish: str | None,
) -> dict:
    envelope = _anthropic_success(text or "", model, input_tokens, output_tokens, finish)
    blocks: list[dict] = [{"type": "text", "text": text}] if text else []
    blocks += [
        {"type": "tool_use", "id": call_id, "name": name, "input": args}
        for name, args, call_id in calls
    ]
    envelope["content"] = blocks
    envelope["stop_reason"] = finish or "tool_use"
    return envelope


def _with_cached_tokens(kind: str, envelope: dict, cached_tokens: int | None) -> dict:
    """``envelope`` reporting ``cached_tokens`` prompt tokens read from the cache."""
    if cached_tokens is None:
        return envelope
    if kind == "gemini":
        envelope["usageMetadata"]["cachedContentTokenCount"] = cached_tokens
    elif kind == "openai_compatible":
        envelope["usage"]["prompt_tokens_details"] = {
            "cached_tokens": cached_tokens,
            "audio_tokens": 0,
        }
    else:
        envelope["usage"]["cache_read_input_tokens"] = cached_tokens
        envelope["usage"]["cache_creation_input_tokens"] = 0
    return envelope


_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_OPENAI_TYPE = {401: "invalid_api_key", 403: "permission_denied", 429: "rate_limit_exceeded"}
_ANTHROPIC_TYPE = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def _error_envelope(kind: str, status: int, message: str) -> dict:
    if kind == "gemini":
        return {
            "error": {
                "code": status,
                "message": message,
                "status": _GOOGLE_STATUS.get(status, "UNKNOWN"),
            }
        }
    if kind == "openai_compatible":
        error_type = "server_error" if status >= 500 else "invalid_request_error"
        return {
            "error": {
                "message": message,
                "type": error_type,
                "param": None,
                "code": _OPENAI_TYPE.get(status),
            }
        }
    return {
        "type": "error",
        "error": {"type": _ANTHROPIC_TYPE.get(status, "api_error"), "message": message},
    }


# --------------------------------------------------------------------------- request checks

_GEMINI_PATH = re.compile(r"/v1beta/models/(?P<model>[A-Za-z0-9._-]+):generateContent")
_GEMINI_BODY = {
    "contents",
    "systemInstruction",
    "generationConfig",
    "safetySettings",
    "tools",
    "toolConfig",
    "cachedContent",
}
_GEMINI_GENERATION = {
    "responseMimeType",
    "responseJsonSchema",
    "responseSchema",
    "temperature",
    "maxOutputTokens",
    "topP",
    "topK",
    "candidateCount",
    "stopSequences",
    "seed",
    "thinkingConfig",
}
_GEMINI_MIME_TYPES = {"text/plain", "application/json", "text/x.enum"}
_GEMINI_DATA_PARTS = {
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
}
_GEMINI_PART_KEYS = _GEMINI_DATA_PARTS | {"thought", "thoughtSignature", "videoMetadata"}
_GEMINI_TOOLS = {
    "functionDeclarations",
    "googleSearch",
    "googleSearchRetrieval",
    "codeExecution",
    "urlContext",
}
_GEMINI_DECLARATION = {
    "name",
    "description",
    "parameters",
    "parametersJsonSchema",
    "response",
    "responseJsonSchema",
    "behavior",
}
_GEMINI_FUNCTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")
_GEMINI_CACHE_NAME = re.compile(r"cachedContents/[A-Za-z0-9_-]+")
_GEMINI_CALLING_MODES = {"AUTO", "ANY", "NONE", "VALIDATED"}
#: Gemini's refusal of a request that sends these next to ``cachedContent``.
GEMINI_CACHE_CONFLICT = (
    "CachedContent can not be used with GenerateContent request setting system_instruction, "
    "tools or tool_config.\n\nProposed fix: move those values to CachedContent from "
    "GenerateContent request."
)
_OPENAI_BODY = {
    "model",
    "messages",
    "temperature",
    "max_tokens",
    "max_completion_tokens",
    "response_format",
    "top_p",
    "seed",
    "stop",
    "n",
    "stream",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
}
_OPENAI_SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_OPENAI_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_OPENAI_MESSAGE = {"role", "content", "name", "tool_calls", "tool_call_id", "refusal"}
_ANTHROPIC_BODY = {
    "model",
    "max_tokens",
    "messages",
    "system",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "metadata",
    "stream",
    "tools",
    "tool_choice",
}
_ANTHROPIC_TOOL_ID = re.compile(r"[A-Za-z0-9_-]+")
_ANTHROPIC_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ANTHROPIC_USER_BLOCKS = {"text", "image", "document", "tool_result"}
_ANTHROPIC_ASSISTANT_BLOCKS = {"text", "tool_use", "thinking", "redacted_thinking"}


def json_post(method: str, headers: dict[str, str], body: bytes) -> tuple[dict | None, list[str]]:
    """(the JSON object body, or None when there is none, and the problems so far) of a
    request every provider API takes as a JSON ``POST``."""
    problems: list[str] = []
    if method != "POST":
        problems.append(f"method {method} (expected POST)")
    if not headers.get("content-type", "").startswith("application/json"):
        problems.append("content-type is not application/json")
    try:
        parsed = json.loads(body)
    except ValueError:
        return None, [*problems, "body is not JSON"]
    if not isinstance(parsed, dict):
        return None, [*problems, "body is not a JSON object"]
    return parsed, problems


def check_request(
    kind: str, method: str, path: str, headers: dict[str, str], body: bytes
) -> list[str]:
    """Where a request departs from what the real API accepts (empty when it conforms).

    Keys are not checked here: a wrong key is not a format problem, and the server answers
    it the way the provider does (see ``FakeProvider._refuse_key``).
    """
    parsed, problems = json_post(method, headers, body)
    if parsed is None:
        return problems
    checks = {"gemini": _check_gemini, "openai_compatible": _check_openai}
    checks.get(kind, _check_anthropic)(path, headers, parsed, problems)
    return problems


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


# ------------------------------------------------------------------ gemini


def _check_gemini(path: str, headers: dict, body: dict, problems: list[str]) -> None:
    if not _GEMINI_PATH.fullmatch(path):
        problems.append("path is not /v1beta/models/{model}:generateContent")
    if "authorization" in headers:
        problems.append("Gemini API keys go in x-goog-api-key, not Authorization")
    if body.keys() - _GEMINI_BODY:
        problems.append(f"unknown body fields {sorted(body.keys() - _GEMINI_BODY)}")
    cached = "cachedContent" in body
    _check_gemini_contents(body.get("contents"), cached, problems)
    system = body.get("systemInstruction")
    if system is not None and not (
        isinstance(system, dict)
        and isinstance(system.get("parts"), list)
        and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in system["parts"])
    ):
        problems.append("systemInstruction must be {parts: [{text}]}")
    if "tools" in body:
        _check_gemini_tools(body["tools"], problems)
    if "toolConfig" in body:
        _check_gemini_tool_config(body["toolConfig"], problems)
    if cached:
        name = body["cachedContent"]
        if not isinstance(name, str) or not _GEMINI_CACHE_NAME.fullmatch(name):
            problems.append("cachedContent must be a cachedContents/{id} name")
        if {"systemInstruction", "tools", "toolConfig"} & body.keys():
            problems.append(GEMINI_CACHE_CONFLICT)
    if "generationConfig" in body:
        _check_gemini_generation(body["generationConfig"], problems)


def _check_gemini_contents(contents: Any, cached: bool, problems: list[str]) -> None:
    if not isinstance(contents, list) or not contents:
        problems.append("contents must be a non-empty array")
        return
    previous: dict | None = None
    for index, content in enumerate(contents):
        where = f"contents[{index}]"
        parts = content.get("parts") if isinstance(content, dict) else None
        if not (
            isinstance(content, dict)
            and not content.keys() - {"role", "parts"}
            and content.get("role") in {"user", "model"}
            and isinstance(parts, list)
            and parts
        ):
            problems.append(f"{where} must be {{role: user|model, parts: [part, ...]}}")
            return
        for number, part in enumerate(parts):
            problem = _gemini_part_problem(part)
            if problem:
                problems.append(f"{where}.parts[{number}] {problem}")
                return
        calls = sum(1 for part in parts if "functionCall" in part)
        responses = sum(1 for part in parts if "functionResponse" in part)
        if calls and content["role"] != "model":
            problems.append(f"{where}: function calls belong in a model turn")
        if responses and content["role"] != "user":
            problems.append(f"{where}: function responses belong in a user turn")
        # With a cache, the first new turn may follow (or answer) a turn kept in the cache.
        continues_cache = cached and previous is None
        if calls and not continues_cache and (previous is None or previous["role"] != "user"):
            problems.append(
                "Please ensure that function call turn comes immediately after a user turn "
                "or after a function response turn."
            )
        if responses and not continues_cache:
            previous_calls = (
                sum(1 for part in previous["parts"] if "functionCall" in part) if previous else 0
            )
            if not previous_calls:
                problems.append(
                    "Please ensure that function response turn comes immediately after a "
                    "function call turn."
                )
            elif previous_calls != responses:
                problems.append(
                    "Please ensure that the number of function response parts is equal to "
                    "the number of function call parts of the function call turn."
                )
        previous = content


def _gemini_part_problem(part: Any) -> str | None:
    """What is wrong with one part of a Gemini content (None: nothing)."""
    if not isinstance(part, dict):
        return "must be an object"
    if part.keys() - _GEMINI_PART_KEYS:
        return f"has unknown fields {sorted(part.keys() - _GEMINI_PART_KEYS)}"
    data = part.keys() & _GEMINI_DATA_PARTS
    if len(data) != 1:
        return "must have exactly one data field (text, functionCall, functionResponse, ...)"
    if "text" in part and not isinstance(part["text"], str):
        return "text must be a string"
    if "functionCall" in part:
        call = part["functionCall"]
        if not (
            isinstance(call, dict)
            and not call.keys() - {"id", "name", "args"}
            and isinstance(call.get("name"), str)
            and _GEMINI_FUNCTION_NAME.fullmatch(call["name"])
            and isinstance(call.get("id", ""), str)
            and isinstance(call.get("args", {}), dict)
        ):
            return "functionCall must be {id?, name, args?: object}"
    if "functionResponse" in part:
        response = part["functionResponse"]
        if not (
            isinstance(response, dict)
            and not response.keys() - {"id", "name", "response", "willContinue", "scheduling"}
            and isinstance(response.get("name"), str)
            and _GEMINI_FUNCTION_NAME.fullmatch(response["name"])
            and isinstance(response.get("id", ""), str)
            and isinstance(response.get("response"), dict)
        ):
            return "functionResponse must be {id?, name, response: object}"
    if "inlineData" in part:
        inline = part["inlineData"]
        if not (
            isinstance(inline, dict)
            and not inline.keys() - {"mimeType", "data"}
            and isinstance(inline.get("mimeType"), str)
            and isinstance(inline.get("data"), str)
        ):
            return "inlineData must be {mimeType, data}"
    if "fileData" in part:
        file_data = part["fileData"]
        if not (
            isinstance(file_data, dict)
            and not file_data.keys() - {"mimeType", "fileUri"}
            and isinstance(file_data.get("mimeType", ""), str)
            and isinstance(file_data.get("fileUri"), str)
        ):
            return "fileData must be {mimeType?, fileUri}"
    return None


def _check_gemini_tools(tools: Any, problems: list[str]) -> None:
    if not isinstance(tools, list) or not all(
        isinstance(tool, dict) and tool and not tool.keys() - _GEMINI_TOOLS for tool in tools
    ):
        problems.append("tools must be [{functionDeclarations: [...]} | {googleSearch: {}} ...]")
        return
    names: list[str] = []
    for tool in tools:
        if "functionDeclarations" not in tool:
            continue
        declarations = tool["functionDeclarations"]
        if not isinstance(declarations, list) or not declarations:
            problems.append("functionDeclarations must be a non-empty array")
            continue
        for declaration in declarations:
            problem = _gemini_declaration_problem(declaration)
            if problem:
                problems.append(problem)
                return
            names.append(declaration["name"])
    for name in sorted({name for name in names if names.count(name) > 1}):
        problems.append(f"Duplicate function declaration found: {name}")


def _gemini_declaration_problem(declaration: Any) -> str | None:
    if not isinstance(declaration, dict) or declaration.keys() - _GEMINI_DECLARATION:
        return "functionDeclarations entries must be {name, description?, parameters?}"
    name = declaration.get("name")
    if not isinstance(name, str) or not _GEMINI_FUNCTION_NAME.fullmatch(name):
        return "function declaration name must match [A-Za-z_][A-Za-z0-9_.:-]{0,63}"
    if not isinstance(declaration.get("description", ""), str):
        return "function declaration description must be a string"
    if "parameters" in declaration and "parametersJsonSchema" in declaration:
        return "parameters and parametersJsonSchema are exclusive"
    if "parameters" in declaration:
        schema = declaration["parameters"]
        if not isinstance(schema, dict):
            return "parameters must be an object"
        if "additionalProperties" in json.dumps(schema) or "$ref" in json.dumps(schema):
            return "parameters (OpenAPI subset) has additionalProperties or $ref"
    if "parametersJsonSchema" in declaration and not isinstance(
        declaration["parametersJsonSchema"], dict
    ):
        return "parametersJsonSchema must be an object"
    return None


def _check_gemini_tool_config(config: Any, problems: list[str]) -> None:
    calling = config.get("functionCallingConfig") if isinstance(config, dict) else None
    if not isinstance(config, dict) or config.keys() - {
        "functionCallingConfig",
        "retrievalConfig",
    }:
        problems.append("toolConfig must be {functionCallingConfig?, retrievalConfig?}")
        return
    if calling is None:
        return
    if not (
        isinstance(calling, dict)
        and not calling.keys() - {"mode", "allowedFunctionNames"}
        and calling.get("mode", "AUTO") in _GEMINI_CALLING_MODES
        and _is_strings(calling.get("allowedFunctionNames", []))
    ):
        problems.append("functionCallingConfig must be {mode: AUTO|ANY|NONE|VALIDATED, ...}")
        return
    if calling.get("allowedFunctionNames") and calling.get("mode") not in {"ANY", "VALIDATED"}:
        problems.append("allowedFunctionNames may only be set when mode is ANY or VALIDATED")


def _check_gemini_generation(config: Any, problems: list[str]) -> None:
    if not isinstance(config, dict):
        problems.append("generationConfig must be an object")
        return
    if config.keys() - _GEMINI_GENERATION:
        problems.append(
            f"unknown generationConfig fields {sorted(config.keys() - _GEMINI_GENERATION)}"
        )
    mime = config.get("responseMimeType")
    if mime is not None and mime not in _GEMINI_MIME_TYPES:
        problems.append(f"generationConfig.responseMimeType must be one of {_GEMINI_MIME_TYPES}")
    if ("responseSchema" in config or "responseJsonSchema" in config) and mime not in {
        "application/json",
        "text/x.enum",
    }:
        problems.append("a response schema needs responseMimeType application/json")
    if "responseSchema" in config and "responseJsonSchema" in config:
        problems.append("responseSchema and responseJsonSchema are exclusive")
    schema = config.get("responseSchema")
    if schema is not None and (
        "additionalProperties" in json.dumps(schema) or "$ref" in json.dumps(schema)
    ):
        problems.append("responseSchema (OpenAPI subset) has additionalProperties or $ref")
    if "responseJsonSchema" in config and not isinstance(config["responseJsonSchema"], dict):
        problems.append("responseJsonSchema must be an object")
    if "temperature" in config and not (
        _is_number(config["temperature"]) and 0 <= config["temperature"] <= 2
    ):
        problems.append("temperature must be a number in [0, 2]")
    tokens = config.get("maxOutputTokens")
    if tokens is not None and not (isinstance(tokens, int) and tokens >= 1):
        problems.append("maxOutputTokens must be a positive integer")
    if "topP" in config and not (_is_number(config["topP"]) and 0 <= config["topP"] <= 1):
        problems.append("topP must be a number in [0, 1]")
    stops = config.get("stopSequences")
    if stops is not None and not (_is_strings(stops) and len(stops) <= 5):
        problems.append("stopSequences must be at most 5 strings")
    if "seed" in config and not _is_int(config["seed"]):
        problems.append("seed must be an integer")


# ------------------------------------------------------------------ openai-compatible


def _check_openai(path: str, headers: dict, body: dict, problems: list[str]) -> None:
    if path != "/v1/chat/completions":
        problems.append("path is not /v1/chat/completions")
    authorization = headers.get("authorization")
    if authorization is not None and not authorization.startswith("Bearer "):
        problems.append("authorization is not a Bearer token")
    if body.keys() - _OPENAI_BODY:
        problems.append(f"unknown body fields {sorted(body.keys() - _OPENAI_BODY)}")
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model missing")
    _check_openai_messages(body.get("messages"), problems)
    if "temperature" in body and not (
        _is_number(body["temperature"]) and 0 <= body["temperature"] <= 2
    ):
        problems.append("temperature must be a number in [0, 2]")
    tokens = body.get("max_tokens")
    if tokens is not None and not (isinstance(tokens, int) and tokens >= 1):
        problems.append("max_tokens must be a positive integer")
    if "top_p" in body and not (_is_number(body["top_p"]) and 0 <= body["top_p"] <= 1):
        problems.append("top_p must be a number in [0, 1]")
    if "seed" in body and not _is_int(body["seed"]):
        problems.append("seed must be an integer")
    stop = body.get("stop")
    if stop is not None and not (isinstance(stop, str) or (_is_strings(stop) and len(stop) <= 4)):
        problems.append("stop must be a string or at most 4 strings")
    if "tools" in body:
        _check_openai_tools(body["tools"], problems)
    if "tool_choice" in body:
        choice = body["tool_choice"]
        if not (
            choice in {"none", "auto", "required"}
            or (
                isinstance(choice, dict)
                and choice.get("type") == "function"
                and isinstance(choice.get("function"), dict)
                and isinstance(choice["function"].get("name"), str)
            )
        ):
            problems.append("tool_choice must be none, auto, required or {type: function, ...}")
        if not body.get("tools"):
            problems.append("tool_choice is only allowed when tools are specified")
    if "parallel_tool_calls" in body and not isinstance(body["parallel_tool_calls"], bool):
        problems.append("parallel_tool_calls must be a boolean")
    response_format = body.get("response_format")
    if response_format is None:
        return
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not (
            isinstance(spec, dict)
            and isinstance(spec.get("name"), str)
            and _OPENAI_SCHEMA_NAME.fullmatch(spec["name"])
            and isinstance(spec.get("schema"), dict)
            and isinstance(spec.get("strict", False), bool)
        ):
            problems.append("response_format.json_schema must be {name, schema, strict?}")
    elif kind not in {"json_object", "text"}:
        problems.append("response_format.type must be json_schema, json_object or text")


def _openai_tool_call_ok(call: Any) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return (
        isinstance(call, dict)
        and not call.keys() - {"id", "type", "function"}
        and isinstance(call.get("id"), str)
        and bool(call["id"])
        and call.get("type") == "function"
        and isinstance(function, dict)
        and isinstance(function.get("name"), str)
        and isinstance(function.get("arguments"), str)
    )


def _openai_text(content: Any) -> bool:
    """A message's content: a string or text parts."""
    return isinstance(content, str) or (
        isinstance(content, list)
        and bool(content)
        and all(
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            for part in content
        )
    )


def _check_openai_messages(messages: Any, problems: list[str]) -> None:
    if not (
        isinstance(messages, list)
        and messages
        and all(
            isinstance(m, dict)
            and m.get("role") in {"system", "developer", "user", "assistant", "tool"}
            for m in messages
        )
    ):
        problems.append("messages must be [{role, content}]")
        return
    # The ids of the assistant's calls that the tool messages now following it answer.
    calls: set[str] | None = None
    answered: set[str] = set()
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role = message["role"]
        if message.keys() - _OPENAI_MESSAGE:
            problems.append(
                f"{where} has unknown fields {sorted(message.keys() - _OPENAI_MESSAGE)}"
            )
        if role != "tool" and calls is not None:
            _openai_unanswered(calls - answered, problems)
            calls = None
        if role == "assistant":
            tool_calls = message.get("tool_calls")
            if tool_calls is not None and not (
                isinstance(tool_calls, list)
                and tool_calls
                and all(_openai_tool_call_ok(call) for call in tool_calls)
            ):
                problems.append(f"{where}.tool_calls must be [{{id, type: function, function}}]")
                tool_calls = None
            content = message.get("content")
            if content is None and not tool_calls:
                problems.append(f"{where}: content is required unless tool_calls is specified")
            elif content is not None and not _openai_text(content):
                problems.append(f"{where}.content must be a string")
            if tool_calls:
                calls, answered = {call["id"] for call in tool_calls}, set()
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not _openai_text(message.get("content")):
                problems.append(f"{where} must be {{role: tool, tool_call_id, content}}")
            elif calls is None:
                problems.append(
                    "messages with role 'tool' must be a response to a preceding message "
                    "with 'tool_calls'"
                )
            elif call_id not in calls:
                problems.append(f"{where}.tool_call_id answers no call of the assistant message")
            else:
                answered.add(call_id)
        elif not _openai_text(message.get("content")):
            problems.append(f"{where}.content must be a string")
    if calls is not None:
        _openai_unanswered(calls - answered, problems)


def _openai_unanswered(missing: set[str], problems: list[str]) -> None:
    if missing:
        problems.append(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(sorted(missing))}"
        )


def _check_openai_tools(tools: Any, problems: list[str]) -> None:
    if not isinstance(tools, list) or not tools:
        problems.append("tools must be a non-empty array")
        return
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not (
            isinstance(tool, dict)
            and not tool.keys() - {"type", "function"}
            and tool.get("type") == "function"
            and isinstance(function, dict)
            and not function.keys() - {"name", "description", "parameters", "strict"}
            and isinstance(function.get("name"), str)
            and _OPENAI_FUNCTION_NAME.fullmatch(function["name"])
            and isinstance(function.get("description", ""), str)
            and isinstance(function.get("parameters", {}), dict)
            and isinstance(function.get("strict", False), bool)
        ):
            problems.append(
                "tools must be [{type: function, function: {name, description?, parameters?}}]"
            )
            return


# ------------------------------------------------------------------ anthropic


def _check_anthropic(path: str, headers: dict, body: dict, problems: list[str]) -> None:
    if path != "/v1/messages":
        problems.append("path is not /v1/messages")
    if headers.get("anthropic-version") != "2023-06-01":
        problems.append("header anthropic-version missing or wrong")
    if body.keys() - _ANTHROPIC_BODY:
        problems.append(f"unknown body fields {sorted(body.keys() - _ANTHROPIC_BODY)}")
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model missing")
    tokens = body.get("max_tokens")
    if not (isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 1):
        problems.append("max_tokens is required and must be a positive integer")
    messages = body.get("messages")
    if not (
        isinstance(messages, list)
        and messages
        and all(
            isinstance(m, dict)
            and m.get("role") in {"user", "assistant"}
            and isinstance(m.get("content"), str | list)
            for m in messages
        )
        and messages[0].get("role") == "user"
    ):
        problems.append("messages must be [{role: user|assistant, content}] starting with user")
    else:
        _check_anthropic_turns(messages, problems)
    if "system" in body and not isinstance(body["system"], str | list):
        problems.append("system must be a string or text blocks")
    if "temperature" in body and not (
        _is_number(body["temperature"]) and 0 <= body["temperature"] <= 1
    ):
        problems.append("temperature must be a number in [0, 1]")
    if "top_p" in body and not (_is_number(body["top_p"]) and 0 <= body["top_p"] <= 1):
        problems.append("top_p must be a number in [0, 1]")
    if "stop_sequences" in body and not _is_strings(body["stop_sequences"]):
        problems.append("stop_sequences must be a list of strings")
    if "tools" in body:
        _check_anthropic_tools(body["tools"], problems)
    if "tool_choice" in body:
        choice = body["tool_choice"]
        if not (
            isinstance(choice, dict)
            and choice.get("type") in {"auto", "any", "tool", "none"}
            and (choice["type"] != "tool" or isinstance(choice.get("name"), str))
            and isinstance(choice.get("disable_parallel_tool_use", False), bool)
        ):
            problems.append("tool_choice must be {type: auto|any|tool|none, name?}")
        elif choice["type"] in {"any", "tool"} and not body.get("tools"):
            problems.append("tool_choice any or tool needs tools")


def _check_anthropic_turns(messages: list[dict], problems: list[str]) -> None:
    """Blocks, role alternation, and each tool_use answered by a tool_result next turn."""
    uses: list[set[str]] = []
    results: list[set[str]] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role = message["role"]
        if index and messages[index - 1]["role"] == role:
            problems.append(f"{where}: roles must alternate between user and assistant")
        used: set[str] = set()
        answered: set[str] = set()
        content = message["content"]
        if isinstance(content, list):
            if not content:
                problems.append(f"{where}.content must not be empty")
            allowed = _ANTHROPIC_USER_BLOCKS if role == "user" else _ANTHROPIC_ASSISTANT_BLOCKS
            seen_other = False
            for number, block in enumerate(content):
                problem = _anthropic_block_problem(block, allowed)
                if problem:
                    problems.append(f"{where}.content[{number}] {problem}")
                    return
                if block["type"] == "tool_use":
                    used.add(block["id"])
                elif block["type"] == "tool_result":
                    if seen_other:
                        problems.append(
                            f"{where}: tool_result blocks must come first in the content, "
                            "before any other block"
                        )
                    answered.add(block["tool_use_id"])
                else:
                    seen_other = True
        uses.append(used)
        results.append(answered)
    for index in range(len(messages)):
        if results[index]:
            previous = uses[index - 1] if index else set()
            unexpected = results[index] - previous
            if unexpected:
                problems.append(
                    f"messages.{index}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{', '.join(sorted(unexpected))}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
        if uses[index] and index + 1 < len(messages):
            missing = uses[index] - results[index + 1]
            if missing:
                problems.append(
                    f"messages.{index + 1}: `tool_use` ids were found without `tool_result` "
                    f"blocks immediately after: {', '.join(sorted(missing))}. Each `tool_use` "
                    "block must have a corresponding `tool_result` block in the next message."
                )


def _anthropic_block_problem(block: Any, allowed: set[str]) -> str | None:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind not in allowed:
        return f"must be a block of type {sorted(allowed)}"
    if kind == "text":
        if not isinstance(block.get("text"), str):
            return "text must be a string"
        if not block["text"]:
            return "text content blocks must be non-empty"
    elif kind == "tool_use":
        if not (
            not block.keys() - {"type", "id", "name", "input", "cache_control"}
            and isinstance(block.get("id"), str)
            and _ANTHROPIC_TOOL_ID.fullmatch(block["id"])
            and isinstance(block.get("name"), str)
            and isinstance(block.get("input"), dict)
        ):
            return "tool_use must be {id: [A-Za-z0-9_-]+, name, input: object}"
    elif kind == "tool_result":
        result = block.get("content", "")
        if not (
            not block.keys() - {"type", "tool_use_id", "content", "is_error", "cache_control"}
            and isinstance(block.get("tool_use_id"), str)
            and _ANTHROPIC_TOOL_ID.fullmatch(block["tool_use_id"])
            and (
                isinstance(result, str)
                or (
                    isinstance(result, list)
                    and all(
                        isinstance(b, dict) and b.get("type") in {"text", "image"} for b in result
                    )
                )
            )
            and isinstance(block.get("is_error", False), bool)
        ):
            return "tool_result must be {tool_use_id, content?: string|blocks, is_error?}"
    return None


def _check_anthropic_tools(tools: Any, problems: list[str]) -> None:
    if not isinstance(tools, list):
        problems.append("tools must be an array")
        return
    names: list[str] = []
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            problems.append("tools entries must be objects with a name")
            return
        names.append(tool["name"])
        if tool.get("type") not in {None, "custom"}:
            continue  # a server tool (web search, code execution, ...): its own fields
        schema = tool.get("input_schema")
        if not (
            not tool.keys() - {"type", "name", "description", "input_schema", "cache_control"}
            and _ANTHROPIC_TOOL_NAME.fullmatch(tool["name"])
            and isinstance(tool.get("description", ""), str)
            and isinstance(schema, dict)
            and schema.get("type") == "object"
        ):
            problems.append(
                "tools must be [{name: [A-Za-z0-9_-]{1,64}, description?, "
                "input_schema: {type: object, ...}}]"
            )
            return
    if len(names) != len(set(names)):
        problems.append("Tool names must be unique.")
