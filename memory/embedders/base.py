"""What every embedder is: ``Embedder`` (texts → vectors of a fixed ``dimension``, under a
``name`` recorded on every entry it embeds, so vectors from different embedders are never
compared), the bounds ``embed_all`` applies (``EmbeddingLimits``) and the error a failed
call ends in (``EmbeddingError``, whose messages carry codes, statuses, counts and sizes
only, never a text, a key or a URL).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from ctxadmin.providers.base import EMBEDDING_ERROR_CODES, EmbeddingError

__all__ = [
    "DEFAULT_DIMENSION",
    "EMBEDDER_KINDS",
    "ERROR_CODES",
    "MAX_DIMENSION",
    "MAX_NAME_CHARS",
    "Embedder",
    "EmbeddingError",
    "EmbeddingLimits",
    "check_dimension",
]

ERROR_CODES: frozenset[str] = EMBEDDING_ERROR_CODES
EMBEDDER_KINDS: tuple[str, ...] = ("hashing", "openai_compatible", "gemini", "local")
DEFAULT_DIMENSION = 384
MAX_DIMENSION = 16000  # pgvector's limit for ``vector``
MAX_NAME_CHARS = 128  # what an entry's ``embedding_model`` column holds


@dataclass(frozen=True)
class EmbeddingLimits:
    """Bounds on what ``embed_all`` sends: inputs and UTF-8 bytes per call, bytes per input,
    and seconds per call (each call also stops at the caller's deadline)."""

    max_inputs_per_call: int = 128
    max_input_bytes: int = 8192
    max_total_bytes: int = 512 * 1024
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        for field_name in ("max_inputs_per_call", "max_input_bytes", "max_total_bytes"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{field_name} must be a positive integer")
        if self.max_total_bytes < self.max_input_bytes:
            raise ValueError("max_total_bytes must be at least max_input_bytes")
        timeout = self.timeout_s
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ValueError("timeout_s must be a finite number > 0")


class Embedder(ABC):
    """Texts → vectors of ``dimension`` floats, one call's worth at a time.

    ``embed`` receives at most ``EmbeddingLimits.max_inputs_per_call`` texts (and at most
    ``max_batch``, when the service has its own cap) and must finish by ``deadline`` (a
    ``time.monotonic()`` value). Callers use ``embed_all``, which checks what comes back.
    """

    #: Recorded on every entry; vectors are only compared with vectors of the same name.
    name: str
    dimension: int
    #: True when a call leaves the process (network, latency, cost, possible outage).
    remote: bool = False
    #: The service's own cap on inputs per call, when lower than the limits'.
    max_batch: int | None = None
    #: How hybrid search fuses this embedder's ranking with the lexical one when the request
    #: gives no ``weights``, as measured on LoCoMo (bench/memory_bench.py): ``None``, not
    #: measured: reciprocal rank fusion with equal weights; ``0``: the vector ranking only
    #: fills what the lexical ranking leaves empty; ``w`` between 0 and 1: weighted score
    #: fusion, ``1 - w`` for lexical and ``w`` for vector.
    fusion_weight: float | None = None
    #: The relevance floor's two levels when a search gives no ``min_score``
    #: (``memory.fusion.evidenced``). ``min_similarity``: the cosine similarity to a query at
    #: or above which a vector hit is evidence that the scope holds something about it; a
    #: query with no such hit and no lexical match gets no hits. ``min_related_similarity``
    #: (at most ``min_similarity``): for a query with evidence, the cosine down to which its
    #: vector hits are kept (hybrid search keeps a hit with a lexical match either way).
    #: Measured per embedder on LoCoMo (see each one's comment); one not measured keeps what
    #: points the query's way at all (cosine 0 and above).
    min_similarity: float = 0.0
    min_related_similarity: float = 0.0
    #: Whether its cosine similarities tell related from unrelated Chinese, Japanese and
    #: Korean text. ``False``: for a query holding such text, only a lexical match is
    #: evidence for the relevance floor (``memory.fusion.cosines_are_evidence``). One not
    #: measured is taken at its word, as for any query.
    reads_cjk: bool = True

    @abstractmethod
    def embed(self, texts: list[str], *, deadline: float) -> list[list[float]]:
        """One vector per text, in order; may raise ``EmbeddingError``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dimension={self.dimension})"


def check_dimension(dimension: Any, *, minimum: int = 1) -> int:
    if (
        not isinstance(dimension, int)
        or isinstance(dimension, bool)
        or not minimum <= dimension <= MAX_DIMENSION
    ):
        raise ValueError(f"dimension must be an integer from {minimum} to {MAX_DIMENSION}")
    return dimension
