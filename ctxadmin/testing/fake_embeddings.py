"""Local HTTP servers that speak an embedding API's wire format, for tests and benchmarks.

``FakeEmbeddings(kind)`` is a ``FakeProvider`` (same lifecycle, key handling, error
envelopes, scripted replies and request log) for the embedding endpoints instead:

- ``openai_compatible``: ``POST /v1/embeddings`` with ``{model, input: [...],
  encoding_format}``, answered with ``{object: "list", data: [{index, embedding}], usage}``;
- ``gemini``: ``POST /v1beta/models/{model}:batchEmbedContents`` with ``{requests: [{model,
  content: {parts: [{text}]}, outputDimensionality}]}``, answered with ``{embeddings:
  [{values}]}``.

Every request is checked against the real API's shape; one the real API would refuse gets a
400 in the provider's own format and its ``problems`` are recorded, so ``fake.problems == []``
proves the client speaks the format. Unless a reply is scripted, each input gets
``fake_vector(text, dimension)``: deterministic, so a test can tell which vector went where.

    with FakeEmbeddings("openai_compatible", dimension=8) as fake:
        fake.script(fake.success(reverse=True), fake.error(429, retry_after="2"))
        OpenAICompatibleEmbedder(fake.connection(), "text-embedding-3-small", dimension=8)
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from typing import Any

from ctxadmin.providers.base import ProviderKind
from ctxadmin.testing.fake_providers import FakeProvider, RecordedRequest, Reply, json_post

EMBEDDING_KINDS: frozenset[str] = frozenset({"openai_compatible", "gemini"})
DEFAULT_DIMENSION = 8


def fake_vector(text: str, dimension: int) -> list[float]:
    """The unit vector the fake server gives ``text`` by default (stable across runs)."""
    values: list[float] = []
    block = 0
    while len(values) < dimension:
        digest = hashlib.sha256(f"{block}\x00{text}".encode()).digest()
        values.extend((byte - 127.5) / 127.5 for byte in digest)
        block += 1
    values = values[:dimension]
    norm = math.sqrt(sum(value * value for value in values))
    return [value / norm for value in values]


class FakeEmbeddings(FakeProvider):
    """An embedding endpoint of one ``kind`` with scripted replies and a request log.

    ``dimension`` is the size of the vectors it returns unless the request asks for another
    (``dimensions`` for OpenAI, ``outputDimensionality`` for Gemini), as the real services
    do for models that can shorten their vectors.
    """

    def __init__(
        self,
        kind: ProviderKind,
        *,
        api_key: str | None = "fake-embedding-key",
        dimension: int = DEFAULT_DIMENSION,
        responder: Callable[[RecordedRequest], Reply] | None = None,
    ):
        if kind not in EMBEDDING_KINDS:
            raise ValueError(f"no fake embedding endpoint for kind {kind!r}")
        super().__init__(kind, api_key=api_key, responder=responder)
        self.dimension = dimension

    # ------------------------------------------------------------------ requests

    def inputs(self, request: RecordedRequest) -> list[str]:
        """The texts a (well-formed) request asked to embed, in order."""
        body = request.json
        if self.kind == "openai_compatible":
            value = body["input"]
            return [value] if isinstance(value, str) else list(value)
        return [
            "".join(part["text"] for part in item["content"]["parts"]) for item in body["requests"]
        ]

    def requested_dimension(self, request: RecordedRequest) -> int | None:
        body = request.json
        if self.kind == "openai_compatible":
            return body.get("dimensions")
        sizes = {item.get("outputDimensionality") for item in body["requests"]}
        return sizes.pop() if len(sizes) == 1 else None

    # ------------------------------------------------------------------ replies

    def success(  # type: ignore[override]
        self,
        *,
        dimension: int | None = None,
        reverse: bool = False,
        vectors: list[list[Any]] | None = None,
        drop_index: bool = False,
        delay_s: float = 0.0,
    ) -> Reply:
        """A successful reply: ``fake_vector`` of each input at the requested dimension (or
        ``dimension``, to send a wrong one), or exactly ``vectors``. ``reverse`` lists
        OpenAI's data items last to first (each keeps its ``index``); ``drop_index`` leaves
        ``index`` out, as a few compatible servers do."""
        kind = self.kind

        def body(request: RecordedRequest) -> bytes:
            if vectors is not None:
                result = vectors
            else:
                size = dimension or self.requested_dimension(request) or self.dimension
                result = [fake_vector(text, size) for text in self.inputs(request)]
            if kind == "gemini":
                envelope: dict[str, Any] = {"embeddings": [{"values": v} for v in result]}
            else:
                data = [
                    {"object": "embedding", "index": index, "embedding": vector}
                    for index, vector in enumerate(result)
                ]
                if drop_index:
                    for item in data:
                        del item["index"]
                if reverse:
                    data.reverse()
                tokens = sum(len(text.split()) for text in self.inputs(request))
                envelope = {
                    "object": "list",
                    "data": data,
                    "model": request.json.get("model"),
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                }
            return json.dumps(envelope).encode("utf-8")

        return Reply(200, body, delay_s=delay_s)

    def default_reply(self) -> Reply:
        return self.success()

    # ------------------------------------------------------------------ serving

    refusal = "fake embedding server refused the request: "

    def check(self, method: str, path: str, headers: dict[str, str], body: bytes) -> list[str]:
        return list(check_embedding_request(self.kind, method, path, headers, body))


# --------------------------------------------------------------------------- request checks

OPENAI_MAX_INPUTS = 2048
GEMINI_MAX_REQUESTS = 100
_GEMINI_PATH = re.compile(r"/v1beta/models/(?P<model>[A-Za-z0-9._-]+):batchEmbedContents")
_OPENAI_BODY = {"model", "input", "encoding_format", "dimensions", "user"}
_GEMINI_REQUEST = {"model", "content", "taskType", "title", "outputDimensionality"}
_GEMINI_TASKS = {
    "TASK_TYPE_UNSPECIFIED",
    "RETRIEVAL_QUERY",
    "RETRIEVAL_DOCUMENT",
    "SEMANTIC_SIMILARITY",
    "CLASSIFICATION",
    "CLUSTERING",
    "QUESTION_ANSWERING",
    "FACT_VERIFICATION",
    "CODE_RETRIEVAL_QUERY",
}


def check_embedding_request(
    kind: str, method: str, path: str, headers: dict[str, str], body: bytes
) -> list[str]:
    """Where a request departs from what the real embedding API accepts (empty when it
    conforms). Keys are not checked here: the server answers a wrong key as the provider
    does."""
    parsed, problems = json_post(method, headers, body)
    if parsed is None:
        return problems
    if kind == "gemini":
        _check_gemini(path, headers, parsed, problems)
    else:
        _check_openai(path, headers, parsed, problems)
    return problems


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_openai(path: str, headers: dict, body: dict, problems: list[str]) -> None:
    if path != "/v1/embeddings":
        problems.append("path is not /v1/embeddings")
    authorization = headers.get("authorization")
    if authorization is not None and not authorization.startswith("Bearer "):
        problems.append("authorization is not a Bearer token")
    if body.keys() - _OPENAI_BODY:
        problems.append(f"unknown body fields {sorted(body.keys() - _OPENAI_BODY)}")
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model missing")
    inputs = body.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if not (isinstance(inputs, list) and inputs and all(isinstance(t, str) for t in inputs)):
        problems.append("input must be a string or a non-empty list of strings")
    elif len(inputs) > OPENAI_MAX_INPUTS:
        problems.append(f"input has more than {OPENAI_MAX_INPUTS} items")
    elif not all(inputs):
        # OpenAI refuses empty strings among the inputs.
        problems.append("input strings must not be empty")
    if body.get("encoding_format", "float") not in {"float", "base64"}:
        problems.append("encoding_format must be float or base64")
    if "dimensions" in body and not _positive_int(body["dimensions"]):
        problems.append("dimensions must be a positive integer")


def _check_gemini(path: str, headers: dict, body: dict, problems: list[str]) -> None:
    match = _GEMINI_PATH.fullmatch(path)
    if not match:
        problems.append("path is not /v1beta/models/{model}:batchEmbedContents")
    if "authorization" in headers:
        problems.append("Gemini API keys go in x-goog-api-key, not Authorization")
    if body.keys() != {"requests"}:
        problems.append("body must be exactly {requests}")
    requests = body.get("requests")
    if not isinstance(requests, list) or not requests:
        problems.append("requests must be a non-empty list")
        return
    if len(requests) > GEMINI_MAX_REQUESTS:
        problems.append(f"at most {GEMINI_MAX_REQUESTS} requests per batch")
    expected_model = f"models/{match.group('model')}" if match else None
    for position, item in enumerate(requests):
        where = f"requests[{position}]"
        if not isinstance(item, dict):
            problems.append(f"{where} must be an object")
            continue
        if item.keys() - _GEMINI_REQUEST:
            problems.append(f"{where} has unknown fields {sorted(item.keys() - _GEMINI_REQUEST)}")
        if item.get("model") != expected_model:
            problems.append(f"{where}.model must be the path's model, as models/{{model}}")
        content = item.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if not (
            isinstance(parts, list)
            and parts
            and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in parts)
        ):
            problems.append(f"{where}.content must be {{parts: [{{text}}]}}")
        if "outputDimensionality" in item and not _positive_int(item["outputDimensionality"]):
            problems.append(f"{where}.outputDimensionality must be a positive integer")
        if "taskType" in item and item["taskType"] not in _GEMINI_TASKS:
            problems.append(f"{where}.taskType is not a known task type")
