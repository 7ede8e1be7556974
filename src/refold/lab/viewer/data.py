"""The data embedded in a viewer report (format ``refold-view-1``), built so it grows linearly.

* ``strings``: every distinct text once. A rendered message built from a recorded text (the
  ``[step N]`` label, a reminder, a trimmed output) is stored as references into it (``encode``),
  so an output shown as received costs a few integers, not a second copy.
* ``pieces``: every distinct (role, text, step, part, shown, covers, tokens, preview) tuple once;
  ``preview`` is a string id (the command a reply ran, the one-line summary of an output) or -1.
* ``history``: the recorded run, as pieces (prefix; per step reply and outputs, plus PROGRESS/STALE).
* ``variants``: per precomputed rendering and per call, the prompt as a delta against the previous
  call's piece list (``[keep, [new piece ids]]``) and its simulated prefix-cache figures and cost
  (calls whose reply was not stored, e.g. format errors, are left out so that entry i is call i+1). A variant
  whose prompts equal an earlier one's is stored once and points at it (``same_as``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...chat_tokens import message_tokens
from ...history import History
from ...mechanisms.fold import valid_marks
from ...messages import clean
from ...scrub import scrub_text
from ...tokens import Tokenizer
from ...types import Message, Origin, Shown, Step
from ..cache import DEFAULT_PRICES, cost_usd
from ..replay import measure, with_stale
from ..replay.metrics import default_price
from .encode import TextTable
from .preview import display_text, output_preview, reply_preview
from .recorded import Canon, Recorded
from .variants import SWITCHES, Variant

VIEW_FORMAT = "refold-view-1"
SHOWN_CODES: tuple[str, ...] = tuple(s.value for s in Shown)
PART_CODES: tuple[str, ...] = ("system", "task", "reply", "output", "note", "notice", "span")
ROLE_CODES: tuple[str, ...] = ("system", "user", "assistant", "tool")


CACHE_NAME = "vllm"
Progress = Callable[[int, int, str], None]
"""``progress(done, total, what)``: called as each variant of a report is built."""


def _timestamp(message: Message) -> float | None:
    extra = message.get("extra")
    t = extra.get("timestamp") if isinstance(extra, dict) else None
    return float(t) if isinstance(t, int | float) and not isinstance(t, bool) else None


def _latency(step: Step, before: Message | None) -> tuple[float | None, bool]:
    """Seconds the model took for this reply, when the run recorded it: the reply's timestamp
    minus that of the message before it (mini 2.x), or (approximately: ``True``) minus the
    provider's whole-second ``created``."""
    done = _timestamp(step.reply)
    if done is None:
        return None, False
    start = _timestamp(before) if before is not None else None
    approx = start is None
    if start is None:
        extra = step.reply.get("extra")
        response = extra.get("response") if isinstance(extra, dict) else None
        created = response.get("created") if isinstance(response, dict) else None
        start = float(created) if isinstance(created, int | float) and not isinstance(created, bool) else None
    if start is None or not 0 <= done - start < 86_400:
        return None, False
    return round(done - start, 2), approx


def _recorded_cost(step: Step) -> float | None:
    extra = step.reply.get("extra")
    cost = _dollars(extra.get("cost") if isinstance(extra, dict) else None)
    if cost is not None:
        return cost
    usage = step.meta.get("usage")
    return _dollars(usage.get("cost") if isinstance(usage, dict) else None)


def _dollars(cost: Any) -> float | None:
    """A recorded cost, or None when the record holds none (a NaN or infinite cost is no figure,
    and the page's JSON cannot carry it)."""
    if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
        return float(cost)
    return None


class _Tables:
    """The interned string and piece tables shared by the history and every variant."""

    def __init__(self, tok: Tokenizer, steps: Sequence[Step] = ()) -> None:
        self.tok = tok
        self.steps = {s.index: s for s in steps}
        self._previews: dict[tuple[int, str, str], int] = {}
        self.texts = TextTable()
        self.pieces: list[list[Any]] = []
        self._piece_ids: dict[tuple[Any, ...], int] = {}
        self._by_message: dict[tuple[int, int], tuple[int, Message, Origin]] = {}
        self.candidates: dict[int | None, list[str]] = {}  # step (None = prefix) -> recorded texts

    def piece(self, message: Message, origin: Origin) -> int:
        key = (id(message), id(origin))
        hit = self._by_message.get(key)
        if hit is not None:
            return hit[0]
        role = str(message.get("role", "user"))
        text = display_text(message)
        ref = self.texts.ref(text, self.candidates.get(origin.step, ()))
        tokens = len(message_tokens(clean(message), self.tok))
        preview = self._preview(message, origin, text)
        row = (
            ROLE_CODES.index(role) if role in ROLE_CODES else 1,
            repr(ref) if isinstance(ref, list) else ref,
            origin.step or 0,
            PART_CODES.index(origin.part) if origin.part in PART_CODES else 5,
            SHOWN_CODES.index(origin.shown.value),
            origin.covers,
            tokens,
            preview,
        )
        pid = self._piece_ids.get(row)
        if pid is None:
            pid = self._piece_ids[row] = len(self.pieces)
            self.pieces.append([row[0], ref, row[2], row[3], row[4], list(row[5]), row[6], preview])
        self._by_message[key] = (pid, message, origin)  # keep both alive so their ids stay unique
        return pid

    def _preview(self, message: Message, origin: Origin, text: str) -> int:
        """The string id of a reply's command or an output's summary (-1: the page uses the
        first line, e.g. for stubs and notes, which are one line already)."""
        step = self.steps.get(origin.step or 0)
        if step is None or origin.part not in ("reply", "output"):
            return -1
        if origin.shown not in (Shown.RECEIVED, Shown.RESTORED, Shown.TRIMMED, Shown.PREFIX):
            return -1
        key = (step.index, origin.part, text)
        hit = self._previews.get(key)
        if hit is None:
            if origin.part == "reply":
                line = reply_preview(step)
            else:
                j = next((i for i, o in enumerate(step.observations) if o is message), None)
                if j is None:  # a rendered copy: find the recorded output it shows
                    call_id = message.get("tool_call_id")
                    j = next(
                        (
                            i
                            for i, o in enumerate(step.observations)
                            if call_id and o.get("tool_call_id") == call_id
                        ),
                        None,
                    )
                if j is None:
                    j = next((i for i, t in enumerate(step.output_texts) if t and t in text), 0)
                # what the command printed, as recorded (a trimmed copy's marker is no output of it)
                recorded = step.output_texts[j] if j < len(step.observations) else text
                line = output_preview(step, j, recorded)
            hit = self._previews[key] = self.texts.string(line) if line else -1
        return hit


def _history_data(history: History, tables: _Tables, k: int, *, original: History) -> dict[str, Any]:
    prefix = []
    tables.candidates[None] = [display_text(m) for m in history.prefix]
    for s in original.steps:  # recorded texts, when STALE marks are simulated on top of them
        tables.candidates[s.index] = [display_text(s.reply), *(display_text(o) for o in s.observations)]
    for m in history.prefix:
        part = "system" if m.get("role") == "system" else "task"
        prefix.append(tables.piece(m, Origin(None, part, Shown.PREFIX)))
    steps = []
    before: Message | None = history.prefix[-1] if history.prefix else None
    for s in history.steps:
        tables.candidates[s.index] += [display_text(s.reply)]
        steps.append(_step_data(s, tables, k, before))
        before = s.observations[-1] if s.observations else s.reply
    return {"prefix": prefix, "steps": steps}


def _step_data(step: Step, tables: _Tables, k: int, before: Message | None = None) -> dict[str, Any]:
    reply = tables.piece(step.reply, Origin(step.index, "reply", Shown.RECEIVED))
    shown = Shown.RESTORED if step.restore_of else Shown.RECEIVED
    outputs = [
        tables.piece(o, Origin(step.index, "output", shown, step.restore_of)) for o in step.observations
    ]
    usage = step.meta.get("usage") if isinstance(step.meta.get("usage"), dict) else None
    latency, approx = _latency(step, before)
    return {
        "reply": reply,
        "outputs": outputs,
        "progress": step.progress,
        "stale": list(step.stale),
        "marks": list(valid_marks(step, k)),
        "protocol": step.has_protocol,
        "restore_of": list(step.restore_of),
        "commands": [a.command for a in step.actions],
        "recorded_prompt_tokens": usage.get("prompt_tokens") if usage else None,
        "recorded_cached_tokens": usage.get("cached_tokens") if usage else None,
        "recorded_cost": _recorded_cost(step),
        "latency": latency,
        "latency_approx": approx,
    }


def _variant_data(variant: Variant, recorded: Recorded, history: History, tables: _Tables) -> dict[str, Any]:
    start = time.perf_counter()
    m = measure(history, recorded, tables.tok, cache_name=CACHE_NAME)
    per_call = m.per_call or {}
    price = DEFAULT_PRICES[default_price(CACHE_NAME)]
    keep = [i for i, step in enumerate(per_call.get("step", [])) if step]  # stored calls only
    tokens = [per_call["prompt_tokens"][i] for i in keep]
    cached = [per_call["cached_tokens"][i] for i in keep]
    outputs = [per_call["output_tokens"][i] for i in keep]
    cost = [
        round(cost_usd(price, n, c, n - c, o), 7) for n, c, o in zip(tokens, cached, outputs, strict=True)
    ]
    return {
        "id": variant.id,
        "label": variant.label,
        "kind": variant.kind,
        "switches": variant.switches,
        "settings": variant.settings,
        "uses_stale": variant.uses_stale,
        "calls": recorded.calls,
        "tokens": tokens,
        "cached": cached,
        "cost": cost,
        "stats": recorded.stats,
        "events": recorded.events if any(recorded.events) else None,
        "totals": {
            "prompt_tokens": m.prompt_tokens,
            "cached_tokens": m.cached_tokens,
            "compactions": m.compactions,
            "compaction_input_tokens": m.compaction_input_tokens,
            "cost_usd": round(m.cost_usd, 4),
            "unreplied_calls": m.unreplied_calls,
        },
        "measure_ms": round((time.perf_counter() - start) * 1000, 1),
    }


def build_data(
    history: History,
    variants: Sequence[Variant],
    tok: Tokenizer,
    *,
    title: str = "",
    stale: str = "recorded",
    default: str = "default",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Everything the page needs, as one JSON-ready dict (see the module docstring).

    ``progress(done, total, what)`` is told as each variant is done (the slow part)."""
    if not len(history):
        raise ValueError("the history has no steps: there is no model call to show")
    marked = with_stale(history, stale)
    tables = _Tables(tok, history.steps)
    k = next((int(v.settings.get("k", 3)) for v in variants if v.id == default), 3)
    hist = _history_data(marked, tables, k, original=history)
    canon = Canon(tables.piece)
    out_variants: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for n, v in enumerate(variants):
        if progress is not None:
            progress(n, len(variants), v.label)
        h = marked if v.uses_stale else history
        recorded = Recorded(v.projector, h, canon)
        key = recorded.key()
        if key in seen:  # same prompts: same figures, no need to simulate the cache again
            same = {"id": v.id, "label": v.label, "kind": v.kind, "switches": v.switches}
            out_variants.append(
                {**same, "settings": v.settings, "uses_stale": v.uses_stale, "same_as": seen[key]}
            )
            continue
        seen[key] = v.id
        out_variants.append(_variant_data(v, recorded, h, tables))
    if progress is not None:
        progress(len(variants), len(variants), "page")
    ids = [v["id"] for v in out_variants]
    price = DEFAULT_PRICES[default_price(CACHE_NAME)]
    meta = {
        k2: scrub_text(v) if isinstance(v, str) else v
        for k2, v in history.meta.items()
        if isinstance(v, str | int | float | bool) or v is None
    }
    return {
        "format": VIEW_FORMAT,
        # a file name that is not UTF-8 (bytes kept as lone surrogates) could not be written
        "title": scrub_text(title or str(history.meta.get("instance_id") or Path(history.source).name or "agent run")),
        "source": scrub_text(Path(history.source).name) if history.source else "",
        "meta": meta,
        "notice": _unlogged_notice(history),
        "calls": len(history),
        "k": k,
        "stale_source": stale,
        "recorded_marks": sum(len(s.stale) for s in history.steps),
        "marks": sum(len(s.stale) for s in marked.steps),
        "tokenizer": tok.name,
        "cache": "vLLM prefix cache, simulated (block size 16, unbounded)",
        "price": {
            "name": default_price(CACHE_NAME),
            "input": price.input_per_mtok,
            "cached": price.cached_input_per_mtok,
            "output": price.output_per_mtok,
        },
        "codes": {"shown": SHOWN_CODES, "part": PART_CODES, "role": ROLE_CODES},
        "switch_names": SWITCHES,
        "default": default if default in ids else next((i for i in ids if i != "base"), ids[0]),
        "base": "base" if "base" in ids else ids[0],
        "strings": tables.texts.strings,
        "pieces": tables.pieces,
        "history": hist,
        "variants": out_variants,
    }


def _unlogged_notice(history: History) -> str:
    """What this page's counts leave out for a log that does not hold the whole request (refold
    view shows the logged messages; refold replay adds an ESTIMATED prefix for the rest)."""
    from ..replay.prefix_notes import MISSING

    missing = MISSING.get(str(history.meta.get("format") or ""))
    partial = history.meta.get("partial")
    head = f"Partial file: {'; '.join(map(str, partial))}. " if isinstance(partial, list) and partial else ""
    if missing is None:
        return head.rstrip()
    return f"{head}{missing}: every count here is of the logged messages only (refold replay adds an ESTIMATED prefix for them; a budget line counts it)"
