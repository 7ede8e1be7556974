"""The request as a provider counts it: chat-template framing per message and per tool call, and
the tool schemas a request carries (Qwen's template, OpenAI's o200k/cl100k framing).

Each message is rendered as the model's chat template would and its ids are memoized per message
content: a replay re-tokenizes the same history hundreds of times, so repeated calls are dict lookups.
"""

from __future__ import annotations

import json
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .tokens import IM_END, IM_SEP, IM_START, TOOL_CALL, TOOL_CALL_END, TOOL_RESP, TOOL_RESP_END, Tokenizer

__all__ = [
    "FRAME",
    "MINI_BASH_TOOL",
    "clear_message_cache",
    "count_messages",
    "message_ids",
    "message_tokens",
    "priming_ids",
    "prompt_token_ids",
    "qwen_system_ids",
    "tools_text",
    "tools_token_ids",
    "turn_flags",
    "with_tools",
]

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
        _priming_cache.clear()
        _tools_cache.clear()


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


# OpenAI's framing of tool-call turns is not published; these counts are fitted on recorded
# gpt-5-mini usage (o200k, mini-swe-agent 2.2.4, 11 runs, every call exact; see
# benchmarks/bench_request_tokens.py): each tool call costs 8 framing tokens more than the
# cookbook's 3/message, its tool result 3 more, and text next to tool calls 7 more (a message
# of its own). cl100k keeps the cookbook counts (exact on CodeR/GPT-4-Turbo, which sends no tools).
FRAME = "<|frame|>"
_TOOL_FRAMING: dict[str, tuple[int, int, int]] = {"o200k": (8, 3, 7)}


def _compact_json(args: str) -> str:
    # The provider re-serializes the arguments it shows the model (a recorded '"timeout":  1'
    # counts as '"timeout":1').
    try:
        return json.dumps(json.loads(args), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError):
        return args


def _openai_segments(msg: Mapping[str, Any], framing: tuple[int, int, int] | None) -> list[str | None]:
    # <|im_start|>role<|im_sep|>content<|im_end|>: 3 specials/message, +1 when a name is set.
    role = str(msg.get("role", "user"))
    segs: list[str | None] = [None, IM_START, role, None, IM_SEP]
    if msg.get("name"):
        segs += [str(msg["name"]), None, IM_SEP]
    content = _text_of(msg.get("content"))
    segs.append(content)
    calls = msg.get("tool_calls") or []
    for call in calls:
        name, args = _call_parts(call)
        segs += [None, IM_SEP, name, None, IM_SEP, _compact_json(args) if framing else args]
    if framing is not None:
        per_call, per_result, text_with_calls = framing
        extra = per_call * len(calls) + (text_with_calls if calls and content else 0)
        extra += per_result if role == "tool" else 0
        for _ in range(extra):
            segs += [None, FRAME]
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


def message_ids(
    msg: Mapping[str, Any], tok: Tokenizer, open_turn: bool, close_turn: bool
) -> tuple[int, ...]:
    """One message's ids in the chat template, memoized by content (shared: do not change them);
    ``open_turn``/``close_turn`` False inside a run of Qwen tool results sharing one user turn."""
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
    segs = (
        _qwen_segments(msg, open_turn, close_turn)
        if qwen
        else _openai_segments(msg, _TOOL_FRAMING.get(tok.name))
    )
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
    return list(message_ids(message, tok, True, True))


def turn_flags(messages: Sequence[Mapping[str, Any]], i: int, qwen: bool) -> tuple[bool, bool]:
    """Whether message i opens and closes its turn: consecutive Qwen tool results share one user turn."""
    if not qwen or messages[i].get("role") != "tool":
        return True, True
    return (
        i == 0 or messages[i - 1].get("role") != "tool",
        i + 1 == len(messages) or messages[i + 1].get("role") != "tool",
    )


def _turn_flags(messages: Sequence[Mapping[str, Any]], tok: Tokenizer) -> Iterator[tuple[bool, bool]]:
    qwen = getattr(tok, "template", "openai") == "qwen"
    return (turn_flags(messages, i, qwen) for i in range(len(messages)))


_priming_cache: dict[str, tuple[int, ...]] = {}


def priming_ids(tok: Tokenizer) -> tuple[int, ...]:
    """The assistant turn's opening a prompt ends with (``add_generation_prompt``)."""
    ids = _priming_cache.get(tok.name)
    if ids is None:
        if getattr(tok, "template", "openai") == "qwen":
            ids = _render(tok, [None, IM_START, "assistant\n"])
        else:
            ids = _render(tok, [None, IM_START, "assistant", None, IM_SEP])
        _priming_cache[tok.name] = ids
    return ids


def prompt_token_ids(
    messages: Sequence[Mapping[str, Any]],
    tok: Tokenizer,
    add_generation_prompt: bool = True,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> list[int]:
    """Concatenated template ids of ``messages`` (+ reply priming), for prefix-cache simulation.

    ``tools`` (OpenAI function schemas sent with the request) are counted where the provider
    puts them: before the messages for OpenAI, inside the system turn for Qwen.
    """
    ids: list[int] = []
    msgs, qwen_tools = with_tools(messages, tok, tools)
    if tools and not qwen_tools:
        ids.extend(tools_token_ids(tools, tok))
    for i, (msg, (o, c)) in enumerate(zip(msgs, _turn_flags(msgs, tok), strict=True)):
        ids.extend(qwen_system_ids(msg, tok, qwen_tools) if i == 0 and qwen_tools else message_ids(msg, tok, o, c))
    if add_generation_prompt:
        ids.extend(priming_ids(tok))
    return ids


def count_messages(
    messages: Sequence[Mapping[str, Any]],
    tok: Tokenizer,
    add_generation_prompt: bool = True,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> int:
    """Prompt tokens for ``messages`` (and ``tools``): per-message template tokens + reply priming."""
    if tools:
        return len(prompt_token_ids(messages, tok, add_generation_prompt, tools))
    total = sum(
        len(message_ids(msg, tok, o, c))
        for msg, (o, c) in zip(messages, _turn_flags(messages, tok), strict=True)
    )
    return total + (len(priming_ids(tok)) if add_generation_prompt else 0)


# ---- tool schemas ---------------------------------------------------------------------------

MINI_BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to execute"}},
            "required": ["command"],
        },
    },
}
"""mini-swe-agent 2.x's one tool (``minisweagent/models/utils/actions_toolcall.py``, MIT)."""

# Tokens OpenAI adds around a request's tool block beyond the TypeScript text below (the
# system/developer header it writes when tools are present). Fitted: gpt-5-mini's first call
# is 121 o200k tokens over the cookbook count with mini's bash tool, 38 of them the schema
# text. cl100k with tools is uncalibrated (no recorded run sends tools): 0.
_TOOLS_OVERHEAD = {"o200k": 83}


def _ts_type(schema: Mapping[str, Any]) -> str:
    t = schema.get("type")
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if t == "array":
        items = schema.get("items")
        return f"{_ts_type(items) if isinstance(items, Mapping) else 'any'}[]"
    if t == "integer":
        return "number"
    return t if isinstance(t, str) else "any"


def tools_text(tools: Sequence[Mapping[str, Any]], template: str = "openai") -> str:
    """The text a chat template makes of function schemas.

    ``openai``: the TypeScript namespace OpenAI's models are shown (as in its harmony format);
    ``qwen``: the ``# Tools`` block of Qwen3's chat template (JSON per tool in ``<tools>``).
    """
    if template == "qwen":
        body = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
        return (
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
            + body
            + "\n</tools>\n\nFor each function call, return a json object with function name and "
            "arguments within <tool_call></tool_call> XML tags:\n"
        )
    out = ["# Tools\n\n## functions\n\nnamespace functions {\n"]
    for t in tools:
        fn = t.get("function", t)
        params = fn.get("parameters") or {}
        props = params.get("properties") or {}
        required = set(params.get("required") or [])
        if fn.get("description"):
            out.append(f"\n// {fn['description']}\n")
        else:
            out.append("\n")
        if not props:
            out.append(f"type {fn.get('name', '')} = () => any;\n")
            continue
        out.append(f"type {fn.get('name', '')} = (_: {{\n")
        for key, spec in props.items():
            spec = spec if isinstance(spec, Mapping) else {}
            if spec.get("description"):
                out.append(f"// {spec['description']}\n")
            out.append(f"{key}{'' if key in required else '?'}: {_ts_type(spec)},\n")
        out.append("}) => any;\n")
    out.append("\n} // namespace functions")
    return "".join(out)


_tools_cache: dict[tuple[str, str], tuple[int, ...]] = {}


def tools_token_ids(tools: Sequence[Mapping[str, Any]], tok: Tokenizer) -> list[int]:
    """Ids of a request's tool block as an OpenAI-style model sees it (before the messages)."""
    key = (tok.name, json.dumps(list(tools), sort_keys=True, default=str))
    ids = _tools_cache.get(key)
    if ids is None:
        segs: list[str | None] = [None, FRAME] * _TOOLS_OVERHEAD.get(tok.name, 0)
        segs.append(tools_text(tools, "openai"))
        ids = _render(tok, segs)
        _tools_cache[key] = ids
    return list(ids)


_NO_SYSTEM: Mapping[str, Any] = {"role": "system", "content": None}  # one object: a session sees it unchanged


def with_tools(
    messages: Sequence[Mapping[str, Any]], tok: Tokenizer, tools: Sequence[Mapping[str, Any]] | None
) -> tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None]:
    """For Qwen, a request with tools starts with a system turn that carries them."""
    if not tools or getattr(tok, "template", "openai") != "qwen":
        return messages, None
    if messages and messages[0].get("role") in ("system", "developer"):
        return messages, tools
    return [_NO_SYSTEM, *messages], tools


def qwen_system_ids(msg: Mapping[str, Any], tok: Tokenizer, tools: Sequence[Mapping[str, Any]]) -> tuple[int, ...]:
    """Qwen's system turn carrying the request's tool schemas (after the system text, if any)."""
    content = _text_of(msg.get("content"))
    head = content + "\n\n" if content else ""
    segs: list[str | None] = [None, IM_START, "system\n" + head + tools_text(tools, "qwen"), None, TOOL_CALL]
    segs += ['\n{"name": <function-name>, "arguments": <args-json-object>}\n', None, TOOL_CALL_END]
    return _render(tok, [*segs, None, IM_END, "\n"])
