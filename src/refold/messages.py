"""Small builders for the chat messages a rendered prompt is made of."""

from __future__ import annotations

import re
from typing import Any

from .mechanisms.summary import summarize
from .mechanisms.summary_wrap import command_line, unwrap
from .protocol import CM
from .types import Action, Message, Step

_API_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "function_call", "refusal", "audio")
_IF_SET = ("function_call", "refusal", "audio")  # an SDK's ``refusal: null`` is not sent on

__all__ = ["action_of", "clean", "label", "mask_note", "with_content", "with_text"]


_KEPT: dict[tuple[str, ...], tuple[tuple[str, ...], bool]] = {}
"""A message's keys -> those of them an API receives, and whether one is sent only when set."""


def clean(message: Message) -> Message:
    """The message as an API receives it (drops recorder fields such as mini's ``extra``)."""
    shape = tuple(message)
    kept = _KEPT.get(shape)
    if kept is None:  # a few shapes per run: the key test runs once per shape
        if len(_KEPT) >= 256:
            _KEPT.clear()
        keys = tuple(k for k in _API_KEYS if k in message)
        kept = _KEPT[shape] = (keys, any(k in keys for k in _IF_SET))
    keys, optional = kept
    out = dict(zip(keys, map(message.__getitem__, keys), strict=True))
    if optional:  # the legacy call, a refusal or an audio reference is sent as the agent wrote it
        for k in _IF_SET:
            if k in out and out[k] is None:
                del out[k]
    return out


def with_text(message: Message, text: str) -> Message:
    out = clean(message)
    out["content"] = text
    return out


def with_content(message: Message, text: str) -> Message:
    """``message`` with its text replaced; non-text parts (images) are kept after it. A text part is
    any part with a ``text`` string (``text``, the Responses API's ``input_text``/``output_text``),
    as ``content_text`` reads them: keeping those would send the text twice."""
    out = clean(message)
    if isinstance(message.get("content"), list):
        parts: list[Any] = [{"type": "text", "text": text}]
        parts += [p for p in message["content"] if isinstance(p, dict) and p.get("type") != "text" and not isinstance(p.get("text"), str)]
        out["content"] = parts
    else:
        out["content"] = text
    return out


def label(step: int, body: str) -> str:
    return f"[step {step}]\n{body}"


def action_of(step: Step, j: int) -> Action | None:
    """The action whose output is observation ``j``: by tool-call id, else by position."""
    obs = step.observations[j] if 0 <= j < len(step.observations) else {}
    call_id = obs.get("tool_call_id")
    if call_id:
        return next((a for a in step.actions if a.tool_call_id == call_id), None)
    if any(o.get("tool_call_id") for o in step.observations):
        return None  # a tool-call step: a message without an id answers no call (e.g. a format error)
    return step.actions[j] if j < len(step.actions) else None


def mask_note(step: Step, j: int, *, reversible: bool) -> str:
    """What replaces observation ``j`` of ``step`` when masking hides it (one line after the label).

    Names the step, the command, the recorded exit status, the size of THIS output and a
    one-line summary made without a model call, so the agent can decide whether to restore it.
    """
    texts = step.output_texts
    text = texts[j] if 0 <= j < len(texts) else ""
    action = action_of(step, j)
    command, tool = (action.command, action.tool) if action else ("", "bash")
    s = summarize(command, text, tool)
    # a tool-call step's outputs are the messages answering a call; a format error after them
    # (mini 2.x: 'No tool calls found') is not one, so it does not make "Output 1 of 4"
    calls = [k for k, o in enumerate(step.observations) if o.get("tool_call_id")] or list(range(len(texts)))
    which = f"Output {calls.index(j) + 1} of {len(calls)}" if len(calls) > 1 and j in calls else "Output"
    shown = command_line(tool, command, 40) if command.strip() else ""
    u = unwrap(text)  # what the command printed: the harness's wrapper is not the output
    body, lines = u.body, u.lines
    size = f"{lines:,} line{'' if lines == 1 else 's'}"
    if len(body) > 200 * max(lines, 1):  # long lines: the line count alone would understate it
        size += f", {len(body):,} chars"
    # 'make | tail' exits with tail's status: say whose it is (a read's or a search's says little)
    info = action.effects if action else None
    of = f" of {info.exit_of}" if info and info.exit_of and info.kind in ("command", "test") else ""
    facts = ([f"exit {s.status}{of}"] if s.status is not None else []) + [size]
    summary = _read_text(s.text, shown, info.reads if info else ()) if s.kind == "read" else s.text
    if s.kind == "output" and info and info.kind == "read":  # 'f: "first" … "last"': f is in the command
        summary = next((summary[len(r) + 2 :] for r in info.reads if summary.startswith(f"{r}: ") and r in shown), summary)
    end = "" if summary.endswith((".", "\u2026", "!", "?")) else "."
    what = f" of `{shown}`" if shown else ""
    hint = f" `restore {step.index}` shows it." if reversible else " It cannot be restored."
    return f"[step {step.index}]\n{CM} {which}{what} hidden ({'; '.join(facts)}): {summary}{end}{hint}"


_READ_COUNT = re.compile(r"^(\S*?) ?\([\d,]+ lines?\)(?:: )?")
_COUNT = re.compile(r"\([\d,]+ lines?\)(?:: )?")


def _read_text(summary: str, shown: str, paths: tuple[str, ...] = ()) -> str:
    """A read's summary in a note that already gives the size and names the command: without the
    path the command names and without a second line count (``read_file m1.py (40 lines): def g0``
    -> ``def g0``). ``paths``: the files the command reads, which may hold spaces (a quoted or
    escaped name): the summary's path is the one it opens with, not its first word."""
    known = next((p for p in sorted(paths, key=len, reverse=True) if p and summary.startswith(p + " ")), None)
    if known is not None:
        tail = summary[len(known) + 1 :]
        m = _COUNT.match(tail)
        path, rest = known, (tail[m.end() :] if m else tail)
    else:
        m = _READ_COUNT.match(summary)
        path, rest = (m.group(1), summary[m.end() :]) if m else summary.partition(" ")[::2]
    path = "" if path == "file" else path  # the summary's word for a file it cannot name
    if m:
        rest = re.sub(r"^ of ([\d,]+)", r"of \1 lines", rest)  # '(12 lines) of 40': a part of a file
    if path and path not in shown:
        sep = ": " if m and rest and not rest.startswith("of ") else " " if rest else ""
        return f"{path}{sep}{rest}"
    if not rest:
        return "file contents" if m else summary
    return rest
