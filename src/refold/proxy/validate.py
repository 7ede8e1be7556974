"""Request and upstream-reply checks, run before anything is stored or relayed.

Every chat-completions body is parsed and checked here; a malformed field is an OpenAI-style 400
naming it (``param``), so nothing that cannot be hashed, stored, rendered and sent again reaches a
session. Lone surrogates (``"\\udc80"``, legal JSON and common in tool output decoded with
``surrogateescape``) are not an error: they become U+FFFD in requests and upstream replies alike,
so the same text always hashes the same and a reply that was paid for is never lost.

The functions are plain and surface-neutral so other endpoints (``/v1/messages``,
``/v1/responses``) can call them: ``parse_json_body``, ``check_tree``, ``check_messages``,
``check_tools``, ``check_chat_request``, ``check_upstream_reply``, ``check_chunk``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import ProxyError
from ..scrub import scrub_calls, scrub_text
from .custom_calls import check_custom

MAX_DEPTH = 64
"""JSON nesting accepted in a request (a tool's parameter schema needs far less)."""
MAX_INT = 2**64
"""Integers beyond this are refused: other JSON parsers (and upstreams) cannot read them."""
ROLES = ("system", "developer", "user", "assistant", "tool", "function")



def _name(param: str) -> str:
    return param if "." in param or "[" in param else f"'{param}'"


def _bad(param: str, what: str, code: str = "invalid_value") -> ProxyError:
    """An OpenAI-style 400 whose ``param`` names the field."""
    return ProxyError(400, f"{_name(param)} {what}", code=code, param=param)


def _objects(
    items: Any, p: str, fail: Callable[[str, str], ProxyError], not_list: str,
    not_object: str = "must be an object",
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each object of the array ``items`` with its path; an error naming the first that is not one."""
    if not isinstance(items, list):
        raise fail(p, not_list)
    for j, item in enumerate(items):
        q = f"{p}[{j}]"
        if not isinstance(item, dict):
            raise fail(q, not_object)
        yield q, item


def _strings(
    obj: dict[str, Any], keys: Iterable[str], p: str, fail: Callable[[str, str], ProxyError],
    what: str = "must be a string",
) -> None:
    """Each of ``keys`` that ``obj`` sets (null counts as unset) must be a string."""
    for key in keys:
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise fail(f"{p}.{key}", what)


# ---- parsing ------------------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise ValueError(f"request body contains {name}, which JSON does not allow")


def parse_json_body(raw: bytes) -> Any:
    """A request body as JSON; a one-line 400 for everything JSON or Python cannot take:
    not UTF-8, invalid JSON, ``NaN``/``Infinity``, an integer of thousands of digits, nesting
    deeper than the parser's recursion limit."""
    if not raw.strip():
        raise ProxyError(400, "request body is empty; expected a JSON object", code="invalid_json")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProxyError(400, "request body is not UTF-8 text", code="invalid_json") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise ProxyError(
            400, f"request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}", code="invalid_json"
        ) from None
    except RecursionError:
        raise ProxyError(400, f"request body is nested too deeply (limit {MAX_DEPTH})", code="invalid_json") from None
    except ValueError as e:  # NaN / Infinity, or int()'s digit limit
        what = str(e) if "JSON does not allow" in str(e) else "request body has a number too long to read"
        raise ProxyError(400, what, code="invalid_json") from None


# ---- the whole tree -----------------------------------------------------------------------------




def check_tree(value: Any, path: str = "body", *, max_depth: int = MAX_DEPTH, upstream: bool = False) -> Any:
    """``value`` with lone surrogates replaced; an error naming the first value JSON cannot carry
    through a store and back (NaN, a huge integer, nesting deeper than ``max_depth``). From the
    ``upstream``, NaN and infinities become null instead, so a paid reply is not thrown away."""

    def fail(p: str, what: str) -> ProxyError:
        if upstream:
            return bad_upstream(p, what)
        return _bad(p, what)

    def walk(v: Any, p: str, depth: int) -> Any:
        if isinstance(v, str):
            return scrub_text(v)
        if isinstance(v, bool) or v is None:
            return v
        if isinstance(v, int):
            if abs(v) > MAX_INT:
                raise fail(p, "is an integer too large to pass on")
            return v
        if isinstance(v, float):
            if not math.isfinite(v):
                if upstream:  # e.g. a logprob of -Infinity: the reply is kept, the value is null
                    return None
                raise fail(p, "is not a finite number")
            return v
        if depth >= max_depth:
            raise fail(p, f"is nested too deeply (limit {max_depth})")
        if isinstance(v, dict):
            out: dict[str, Any] = {}
            for k, x in v.items():
                key = scrub_text(k) if isinstance(k, str) else str(k)
                out[key] = walk(x, f"{p}.{key}" if p else key, depth + 1)
            return out
        if isinstance(v, list):
            return [walk(x, f"{p}[{i}]", depth + 1) for i, x in enumerate(v)]
        raise fail(p, f"has a value of type {type(v).__name__}")

    return walk(value, path, 0)


# ---- chat completions -----------------------------------------------------------------------------


def _content(m: dict[str, Any], p: str, fail: Callable[[str, str], ProxyError]) -> None:
    content = m.get("content")
    if content is None or isinstance(content, str):
        return
    parts = _objects(content, f"{p}.content", fail, "must be a string, an array of content parts or null")
    for q, part in parts:
        if not isinstance(part.get("type"), str):
            raise fail(f"{q}.type", "must be a string")
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise fail(f"{q}.text", "must be a string")


def _tool_calls(calls: Any, p: str, fail: Callable[[str, str], ProxyError]) -> None:
    if calls is None:
        return
    for q, c in _objects(calls, p, fail, "must be an array of tool calls"):
        _strings(c, ("id", "type"), q, fail)
        if c.get("type") == "custom" and "function" not in c:  # a free-form tool's call
            check_custom(c, q, fail)
            continue
        _function(c.get("function"), f"{q}.function", fail)


def _function(fn: Any, p: str, fail: Callable[[str, str], ProxyError]) -> None:
    """A called function (a tool call's, or the legacy ``function_call``): a name and JSON text."""
    if not isinstance(fn, dict):
        raise fail(p, "must be an object with 'name' and 'arguments'")
    if not isinstance(fn.get("name"), str):
        raise fail(f"{p}.name", "must be a string")
    if fn.get("arguments") is not None and not isinstance(fn["arguments"], str):
        raise fail(f"{p}.arguments", "must be a string (JSON text)")
    if isinstance(fn.get("arguments"), str) and too_deep(fn["arguments"]):
        raise fail(f"{p}.arguments", f"is JSON nested too deeply (limit {MAX_DEPTH})")


def too_deep(text: str) -> bool:
    """Whether JSON text (a call's arguments, parsed again wherever the call is read) nests deeper
    than the body may: that parse would be a RecursionError. Text that is no JSON is not."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:  # the common case, without a parse
        return False
    try:
        value = json.loads(text)
    except RecursionError:
        return True
    except ValueError:
        return False
    level = [(value, 1)]
    while level:  # iterative: the value may be deep enough to break a recursive walk
        v, depth = level.pop()
        if depth > MAX_DEPTH:
            return True
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        level.extend((c, depth + 1) for c in children)
    return False


def check_message(m: Any, p: str, fail: Callable[[str, str], ProxyError] = _bad) -> None:
    """One chat message (request or reply) in OpenAI's shape."""
    if not isinstance(m, dict):
        raise fail(p, "is not an object")
    if m.get("role") not in ROLES:
        raise fail(f"{p}.role", f"must be one of {', '.join(ROLES)}")
    _content(m, p, fail)
    _tool_calls(m.get("tool_calls"), f"{p}.tool_calls", fail)
    _strings(m, ("tool_call_id", "name", "refusal"), p, fail)
    if m.get("function_call") is not None:  # the legacy single call (``functions=``), sent on as it came
        _function(m["function_call"], f"{p}.function_call", fail)
    audio = m.get("audio")  # a reference to an earlier audio reply
    if audio is not None and not (isinstance(audio, dict) and isinstance(audio.get("id"), str)):
        raise fail(f"{p}.audio", "must be an object with a string 'id'")
    if m.get("role") == "tool" and not isinstance(m.get("tool_call_id"), str):
        raise fail(f"{p}.tool_call_id", "is required for a tool message and must be a string")


def check_messages(messages: Any, param: str = "messages") -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise ProxyError(
            400, f"'{param}' must be a non-empty array of message objects", code="invalid_messages", param=param
        )
    for i, m in enumerate(messages):
        check_message(m, f"{param}[{i}]")
    return messages


def check_tools(tools: Any, param: str = "tools") -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    for p, t in _objects(tools, param, _bad, "must be an array of tool objects"):
        _strings(t, ("type",), p, _bad)
        if t.get("type", "function") == "function" or "function" in t:
            fn = t.get("function")
            if not isinstance(fn, dict):
                raise _bad(f"{p}.function", "must be an object with a 'name'")
            if not isinstance(fn.get("name"), str) or not fn["name"]:
                raise _bad(f"{p}.function.name", "must be a non-empty string")
            if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
                raise _bad(f"{p}.function.parameters", "must be a JSON Schema object")
    checked: list[dict[str, Any]] = tools
    return checked


def check_chat_request(body: Any) -> dict[str, Any]:
    """A ``/v1/chat/completions`` body, checked and with lone surrogates replaced."""
    if not isinstance(body, dict):
        raise ProxyError(400, "request body must be a JSON object", code="invalid_body")
    checked: dict[str, Any] = check_tree(body, "")
    body = checked
    for m in check_messages(body.get("messages")):
        scrub_calls(m)
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise ProxyError(400, "'model' must be a non-empty string", code="invalid_model", param="model")
    check_tools(body.get("tools"))
    for key in ("stream", "parallel_tool_calls", "logprobs"):
        if body.get(key) is not None and not isinstance(body[key], bool):
            raise _bad(key, f"must be true or false, got {json.dumps(body[key])}")
    opts = body.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise _bad("stream_options", "must be an object")
        if opts.get("include_usage") is not None and not isinstance(opts["include_usage"], bool):
            raise _bad("stream_options.include_usage", "must be true or false")
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise _bad("n", "must be a positive integer")
    return checked


# ---- upstream replies ---------------------------------------------------------------------------


def bad_upstream(param: str, what: str) -> ProxyError:
    """A 502 naming the field of the upstream's reply at fault."""
    return ProxyError(
        502, f"upstream reply: {_name(param)} {what}", type="upstream_error", code="bad_upstream_response", param=param
    )


def check_upstream_reply(data: Any) -> dict[str, Any]:
    """A non-streamed chat.completion from upstream, checked (502 naming the field) and scrubbed."""
    if not isinstance(data, dict):
        raise bad_upstream("body", "is not a JSON object")
    checked: dict[str, Any] = check_tree(data, "", max_depth=2 * MAX_DEPTH, upstream=True)
    data = checked
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise bad_upstream("choices", "is not a list")
    for i, c in enumerate(choices):
        if not isinstance(c, dict):
            raise bad_upstream(f"choices[{i}]", "is not an object")
        msg = c.get("message")
        if msg is None:
            continue
        m = {"role": "assistant", **msg} if isinstance(msg, dict) and "role" not in msg else msg
        check_message(m, f"choices[{i}].message", bad_upstream)
        scrub_calls(msg)
    if data.get("usage") is not None and not isinstance(data["usage"], dict):
        raise bad_upstream("usage", "is not an object")
    return checked


def check_chunk(chunk: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of an upstream stream, checked and scrubbed; an ``error``
    event becomes a 502 with the upstream's message."""
    if not isinstance(chunk, dict):
        raise bad_upstream("chunk", "is not a JSON object")
    checked: dict[str, Any] = check_tree(chunk, "chunk", max_depth=2 * MAX_DEPTH, upstream=True)
    chunk = checked
    if chunk.get("error"):
        err = chunk["error"]
        message = err.get("message") if isinstance(err, dict) else str(err)
        raise ProxyError(502, f"upstream stream error: {message}", type="upstream_error", code="upstream_error")
    choices = chunk.get("choices")
    if choices is None:
        choices = []
    for p, c in _objects(choices, "chunk.choices", bad_upstream, "is not a list", "is not an object"):
        if c.get("index") is not None and (isinstance(c["index"], bool) or not isinstance(c["index"], int)):
            raise bad_upstream(f"{p}.index", "is not an integer")
        _strings(c, ("finish_reason",), p, bad_upstream, "is not a string")
        delta = _upstream_strings(c, "delta", p, ("content", "role", "reasoning_content", "refusal"))
        if delta is None:
            continue
        _upstream_strings(delta, "function_call", f"{p}.delta", ("name", "arguments"))
        calls = delta.get("tool_calls")
        if calls is None:
            continue
        deltas = _objects(calls, f"{p}.delta.tool_calls", bad_upstream, "is not a list", "is not an object")
        for q, tc in deltas:
            index = tc.get("index", 0)
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 1024:
                raise bad_upstream(f"{q}.index", "is not a small non-negative integer")
            _strings(tc, ("id",), q, bad_upstream, "is not a string")
            _upstream_strings(tc, "function", q, ("name", "arguments"))
    if chunk.get("usage") is not None and not isinstance(chunk["usage"], dict):
        raise bad_upstream("chunk.usage", "is not an object")
    return checked


def _upstream_strings(parent: dict[str, Any], key: str, p: str, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """``parent[key]`` unless unset: an object whose ``keys`` are strings where set (a 502 otherwise)."""
    value = parent.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_upstream(f"{p}.{key}", "is not an object")
    _strings(value, keys, f"{p}.{key}", bad_upstream, "is not a string")
    return value


def parse_upstream_json(raw: bytes | str, what: str = "body") -> Any:
    """Upstream JSON text; a 502 naming ``what`` when it is not JSON Python can read."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise bad_upstream(what, "is nested too deeply") from None
    except ValueError:
        raise bad_upstream(what, "is not JSON") from None


def parse_chunk(raw: str) -> dict[str, Any]:
    """An SSE ``data:`` payload as a checked chunk."""
    chunk: dict[str, Any] = check_chunk(parse_upstream_json(raw, "chunk"))
    return chunk

