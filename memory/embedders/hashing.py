"""``HashingEmbedder``: offline, deterministic, no dependency; signed feature hashing of
words, word pairs and character n-grams. Lexical rather than semantic, but it never fails."""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from itertools import pairwise, repeat
from operator import add, mul
from pathlib import Path

from memory.embedders.base import DEFAULT_DIMENSION, Embedder, check_dimension

_DATA = Path(__file__).resolve().parent.parent / "data"
_TOKEN = re.compile(r"\w+")
# The features' hash prefix (unchanged since v1: v2 hashes the words it keeps as v1 did).
_HASH_PREFIX = b"ctxadmin/hashing-v1\x00"
_STOP_WORDS = frozenset(
    line.strip()
    for line in (_DATA / "stopwords-en.txt").read_text(encoding="utf-8").splitlines()
    if line.strip() and not line.startswith("#")
)
_WORD, _CHAR = b"w\x1f", b"c\x1f"
_NGRAM_SIZES = (3, 4, 5)
# Longer ``\w+`` runs are identifiers, hashes or encoded blobs: their character n-grams say
# little and cost many hashes, so they count as whole words only.
_MAX_NGRAM_TOKEN_CHARS = 32
_CACHE_ENTRIES = 50_000


class _Sublinear(dict):
    """``1 + ln(tf)`` by term frequency, filled on first use."""

    def __missing__(self, count: int) -> float:
        value = self[count] = 1.0 + math.log(count)
        return value


_SUBLINEAR = _Sublinear()


class HashingEmbedder(Embedder):
    """Signed feature hashing of word unigrams, word bigrams and character 3- to 5-grams.

    Text is lower-cased and split into ``\\w+`` words (Unicode-aware); English stop words
    (``memory/data/stopwords-en.txt``, the list of PostgreSQL's ``english`` configuration)
    are left out unless the text has no other word: nearly every text holds them, so they
    made unrelated texts look alike (v1 kept them; on LoCoMo, leaving them out raised
    exact vector recall@10 from 0.328 to 0.401, and the neighbours stand further apart,
    which HNSW finds more of). Character n-grams are taken within each word, marked
    ``^word$``. Each feature is hashed with BLAKE2b under a fixed prefix (stable across
    processes and machines, unlike ``hash()``) to one of dimensions ``1 .. dimension-1``
    and a sign. A hashed feature seen ``tf`` times weighs
    ``1 + ln(tf)``. Each family (words, word pairs, n-grams) is normalised on its own and
    weighted, then the sum is L2-normalised, so the family weights hold whatever the text's
    length. Dimension 0 is reserved: a text without words (empty, blank, punctuation only)
    is the unit vector on it, orthogonal to every text with words.

    A word's hashes (its own and its n-grams') are cached, bounded, so common vocabulary
    costs dictionary lookups rather than hashing; a word pair's hash is mixed from its two
    words' hashes.
    """

    remote = False
    # Its similarity is lexical: it sees the words BM25 sees. Measured on LoCoMo
    # (bench/memory_bench.py), every weight above 0 in the rank fusion with BM25 lowered
    # recall at some k, so in hybrid search it only fills what lexical search leaves empty
    # (a misspelt or unstemmed word still meets its character n-grams).
    fusion_weight = 0.0
    # Calibrated on LoCoMo's three dev conversations: each category 1-4 question against its
    # evidence turns (645 related pairs) and against 40 random turns of each other
    # conversation (30,960 unrelated pairs: other speakers, other lives). Unrelated pairs:
    # median 0.014, 95th percentile 0.107, 99th 0.165; related: median 0.199. The threshold
    # passes about 1 unrelated pair in 30 (3.5%) and 78% of related ones; BM25 finds most of
    # the rest. A stricter one (0.16, the 99th percentile) kept 63% of related pairs and
    # lost what this embedder adds to hybrid search, a misspelt word ("dalmation" against
    # "we adopted a dalmatian puppy": 0.155). Every evidence turn in the vector top 25 of
    # LoCoMo's questions scores 0.165 or more, so the benchmark's recall is unchanged.
    min_similarity = 0.12
    # For a query with evidence, the same: the lower level is the lowest cosine that keeps
    # every evidence turn vector search ranks in its top 25 for a LoCoMo dev question with
    # evidence (as the local embedder's), capped at min_similarity. Here that turn scores
    # 0.172, above 0.12: the evidence turns below 0.12 (22% of them) are never ranked that
    # high, and a lower level would only admit unrelated hits.
    min_related_similarity = 0.12
    # Unspaced Chinese, Japanese and Korean text is one word a run, so its n-grams say little
    # that the lexical index's character pairs do not say better: on the 24 hand-made CJK
    # memories with a related query each (memory/embedders/local.py), 3 of the 24 related
    # pairs reach 0.12 and 4 of the 168 unrelated same-language ones do. For a CJK query
    # only a lexical match is evidence.
    reads_cjk = False
    WORD_WEIGHT = 1.0
    PAIR_WEIGHT = 0.5
    CHAR_WEIGHT = 0.7

    def __init__(self, dimension: int = DEFAULT_DIMENSION):
        self.dimension = check_dimension(dimension, minimum=2)
        self.name = f"hashing-v2-{self.dimension}"
        self._buckets = self.dimension - 1
        self._tokens: dict[str, tuple[int, int, tuple[int, ...], tuple[int, ...]]] = {}
        self._zeros = [0.0] * self.dimension
        self._sparse_below = max(self.dimension // 4, 8)
        empty = [0.0] * self.dimension
        empty[0] = 1.0
        self._empty = tuple(empty)

    def embed(self, texts: list[str], *, deadline: float) -> list[list[float]]:
        return [self.vector(text) for text in texts]

    def vector(self, text: str) -> list[float]:
        """The unit vector of one text."""
        tokens = _TOKEN.findall(text.lower())
        if not tokens:
            return list(self._empty)
        content = [token for token in tokens if token not in _STOP_WORDS]
        if content:
            tokens = content
        cache = self._tokens
        # Each family is two counters of dimensions: features hashed with a positive sign,
        # and with a negative one.
        word_pos: Counter[int] = Counter()
        word_neg: Counter[int] = Counter()
        gram_pos: list[int] = []
        gram_neg: list[int] = []
        for token, count in Counter(tokens).items():
            features = cache.get(token)
            if features is None:
                features = self._token_features(token)
            _, word, positive, negative = features
            if word > 0:
                word_pos[word] += count
            else:
                word_neg[-word] += count
            if count == 1:
                gram_pos.extend(positive)
                gram_neg.extend(negative)
            else:
                gram_pos.extend(positive * count)
                gram_neg.extend(negative * count)
        vector = self._add_family(self._zeros, word_pos, word_neg, self.WORD_WEIGHT)
        if len(tokens) > 1:
            # A token hashed above may have left the cache since (it is cleared when full):
            # then it is hashed again.
            hashes = [(cache.get(t) or self._token_features(t))[0] for t in tokens]
            buckets = self._buckets
            pair_pos: Counter[int] = Counter()
            pair_neg: Counter[int] = Counter()
            for left, right in pairwise(hashes):
                value = _mix64(left, right)
                if value & 1:
                    pair_neg[1 + (value >> 1) % buckets] += 1
                else:
                    pair_pos[1 + (value >> 1) % buckets] += 1
            vector = self._add_family(vector, pair_pos, pair_neg, self.PAIR_WEIGHT)
        vector = self._add_family(vector, Counter(gram_pos), Counter(gram_neg), self.CHAR_WEIGHT)
        norm = math.sqrt(sum(map(mul, vector, vector)))
        if norm == 0.0:  # features cancelling out exactly: as a text without words
            return list(self._empty)
        return list(map(mul, vector, repeat(1.0 / norm)))

    def _add_family(
        self, vector: list[float], positive: Counter[int], negative: Counter[int], weight: float
    ) -> list[float]:
        """``vector`` plus one family's signed, sublinear term frequencies at norm ``weight``
        (a new list; ``vector`` is not changed)."""
        sublinear = _SUBLINEAR
        if len(positive) + len(negative) < self._sparse_below:
            # Few features (words, pairs): cheaper than passes over every dimension.
            sparse: dict[int, float] = {}
            for index, count in positive.items():
                sparse[index] = sparse.get(index, 0.0) + sublinear[count]
            for index, count in negative.items():
                sparse[index] = sparse.get(index, 0.0) - sublinear[count]
            norm = math.sqrt(sum(value * value for value in sparse.values()))
            if norm == 0.0:
                return vector
            scale = weight / norm
            vector = vector.copy()
            for index, value in sparse.items():
                vector[index] += value * scale
            return vector
        family = self._zeros.copy()
        for index, count in positive.items():
            family[index] += sublinear[count]
        for index, count in negative.items():
            family[index] -= sublinear[count]
        norm = math.sqrt(sum(map(mul, family, family)))
        if norm == 0.0:
            return vector
        return list(map(add, vector, map(mul, family, repeat(weight / norm))))

    def _token_features(self, token: str) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
        """(the token's hash, its word dimension (negated for a negative sign), the dimensions
        of its n-grams with a positive sign, those with a negative sign)."""
        buckets = self._buckets
        token_hash = _hash(_WORD + token.encode("utf-8"))
        word = 1 + (token_hash >> 1) % buckets
        positive: list[int] = []
        negative: list[int] = []
        if len(token) <= _MAX_NGRAM_TOKEN_CHARS:
            marked = f"^{token}$"
            length = len(marked)
            for n in _NGRAM_SIZES:
                for i in range(length - n + 1):
                    value = _hash(_CHAR + marked[i : i + n].encode("utf-8"))
                    (negative if value & 1 else positive).append(1 + (value >> 1) % buckets)
        features = (
            token_hash,
            -word if token_hash & 1 else word,
            tuple(positive),
            tuple(negative),
        )
        if len(self._tokens) >= _CACHE_ENTRIES:
            self._tokens.clear()
        self._tokens[token] = features
        return features


def _hash(feature: bytes) -> int:
    """A stable 64-bit hash: BLAKE2b under the embedder's fixed prefix."""
    digest = hashlib.blake2b(_HASH_PREFIX + feature, digest_size=8).digest()
    return int.from_bytes(digest, "little")


_MASK64 = (1 << 64) - 1


def _mix64(left: int, right: int) -> int:
    """A word pair's hash from its words' hashes (order matters): splitmix64's finaliser
    over an asymmetric combination, much cheaper than hashing the pair's text."""
    value = (left * 0x9E3779B97F4A7C15 + right) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)
