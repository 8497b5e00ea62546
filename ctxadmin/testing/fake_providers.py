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
"""

from __future__ import annotations

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
    ) -> Reply:
        """A successful reply in this kind's format, carrying ``text``; echoes the model."""
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
            return _encode(envelope)

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
_GEMINI_BODY = {"contents", "systemInstruction", "generationConfig", "safetySettings", "tools"}
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
}
_OPENAI_SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
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
}


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


def _check_gemini(path: str, headers: dict, body: dict, problems: list[str]) -> None:
    if not _GEMINI_PATH.fullmatch(path):
        problems.append("path is not /v1beta/models/{model}:generateContent")
    if "authorization" in headers:
        problems.append("Gemini API keys go in x-goog-api-key, not Authorization")
    if body.keys() - _GEMINI_BODY:
        problems.append(f"unknown body fields {sorted(body.keys() - _GEMINI_BODY)}")
    contents = body.get("contents")
    if not (
        isinstance(contents, list)
        and contents
        and all(
            isinstance(c, dict)
            and c.get("role") in {"user", "model"}
            and isinstance(c.get("parts"), list)
            and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in c["parts"])
            for c in contents
        )
    ):
        problems.append("contents must be [{role, parts: [{text}]}]")
    system = body.get("systemInstruction")
    if system is not None and not (
        isinstance(system, dict)
        and isinstance(system.get("parts"), list)
        and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in system["parts"])
    ):
        problems.append("systemInstruction must be {parts: [{text}]}")
    config = body.get("generationConfig")
    if not isinstance(config, dict):
        problems.append("generationConfig missing")
        return
    if config.keys() - _GEMINI_GENERATION:
        problems.append(
            f"unknown generationConfig fields {sorted(config.keys() - _GEMINI_GENERATION)}"
        )
    if config.get("responseMimeType") != "application/json":
        problems.append("generationConfig.responseMimeType is not application/json")
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
    messages = body.get("messages")
    if not (
        isinstance(messages, list)
        and messages
        and all(
            isinstance(m, dict)
            and m.get("role") in {"system", "developer", "user", "assistant"}
            and isinstance(m.get("content"), str)
            for m in messages
        )
    ):
        problems.append("messages must be [{role, content}]")
    if "temperature" in body and not (
        _is_number(body["temperature"]) and 0 <= body["temperature"] <= 2
    ):
        problems.append("temperature must be a number in [0, 2]")
    tokens = body.get("max_tokens")
    if tokens is not None and not (isinstance(tokens, int) and tokens >= 1):
        problems.append("max_tokens must be a positive integer")
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
    if "system" in body and not isinstance(body["system"], str | list):
        problems.append("system must be a string or text blocks")
    if "temperature" in body and not (
        _is_number(body["temperature"]) and 0 <= body["temperature"] <= 1
    ):
        problems.append("temperature must be a number in [0, 1]")
