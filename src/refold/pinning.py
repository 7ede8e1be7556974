"""What a user can open and pin in a run: a step (``7``), one of its parts (``7.2``, ``r7``), a range
(``3-5``) or a span (``S1``). Shared by ``refold sessions`` and the proxy's session view.

``expand_messages`` / ``expand_text`` read the history, so what they show is byte-exact as the
model first saw it (nothing runs, nothing changes). ``Item.target`` is the object ids
``History.pin`` takes for an item: a step pins its reply and its outputs (``r7 7``), a span every
step it covers, so the next prompt shows all of it as first shown until the same item is unpinned.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .config import Config
from .errors import ItemError
from .history import History
from .mechanisms.ledger import parse_ids
from .mechanisms.pins import Pin
from .mechanisms.spans import SpanBook
from .render import Renderer
from .restore import CallLines, call_line
from .types import Message, content_text

_RANGE = re.compile(r"^(\d{1,9})\s*-\s*(\d{1,9})$")
_SPAN = re.compile(r"^S(\d{1,9})$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Item:
    """A resolved item: the label the user gave (normalized) and the parts it covers."""

    label: str
    steps: tuple[int, ...]
    sub: int | None = None  # None: the whole step(s); -1: the reply only; j: output j only
    span: str | None = None

    @property
    def target(self) -> str:
        """The ids ``History.pin`` takes for this item."""
        if self.sub is None:
            return " ".join(f"r{s} {s}" for s in self.steps)
        return f"r{self.steps[0]}" if self.sub == -1 else f"{self.steps[0]}.{self.sub + 1}"


def resolve(history: History, item: str, config: Config | None = None, *, where: str = "") -> Item:
    """The item ``item`` names in ``history`` (``where`` names the run in errors)."""
    cfg = config or Config()
    text = " ".join(item.split())
    at = f"{where}: " if where else ""
    n = len(history)
    have = f"steps 1-{n}" if n else "no steps yet"
    span = _SPAN.match(text)
    if span:
        book = SpanBook.replay(list(history.steps), cfg.spans)
        sp = book.spans.get(f"S{int(span.group(1))}")
        if sp is None:
            known = ", ".join(sorted(book.spans, key=lambda s: int(s[1:]))) or "none"
            raise ItemError(f"{at}no span {text} (spans: {known})")
        end = sp.end if sp.end is not None else n
        return Item(sp.id, tuple(range(sp.begin, end + 1)), span=sp.id)
    rng = _RANGE.match(text)
    if rng:
        a, b = int(rng.group(1)), int(rng.group(2))
        if a > b:
            raise ItemError(f"{at}step range {text} runs backwards")
        for s in (a, b):
            if not 1 <= s <= n:
                raise ItemError(f"{at}no step {s} (the run has {have})")
        return Item(f"{a}-{b}", tuple(range(a, b + 1)))
    ids = parse_ids(text)
    if len(ids) != 1:
        raise ItemError(f"{at}'{text}' is not an item: name a step (7), an output (7.2), a reply (r7), steps 3-5 or a span S1")
    step, sub = ids[0]
    if not 1 <= step <= n:
        raise ItemError(f"{at}no step {step} (the run has {have})")
    outputs = len(history.step(step).observations)
    if sub is not None and sub != -1 and not 0 <= sub < outputs:
        raise ItemError(f"{at}step {step} has {outputs} output(s), so there is no {step}.{sub + 1}")
    if sub is None or (sub == 0 and outputs == 1):
        return Item(str(step), (step,), None if sub is None else sub)
    return Item(f"r{step}" if sub == -1 else f"{step}.{sub + 1}", (step,), sub)


def expand_messages(history: History, item: Item, config: Config | None = None) -> list[tuple[int, str, Message]]:
    """(step, part, message) of ``item`` as first shown to the model: the reply, then the outputs."""
    renderer = Renderer(config or Config())
    out: list[tuple[int, str, Message]] = []
    for s in item.steps:
        msgs = renderer.received(history, s)
        for j, m in enumerate(msgs):
            if item.sub is None or item.sub == j - 1:
                out.append((s, "reply" if j == 0 else f"output {j}", m))
    return out


def expand_text(history: History, item: Item, config: Config | None = None, *, call_lines: CallLines | None = None) -> str:
    """The item as text: a header line per message (``== step 7 reply ==``), then its content verbatim;
    ``call_lines``: how the recorder shows a reply's calls as sent (``restore.CallLines``)."""
    parts = []
    if item.span is not None:
        parts.append(f"== span {item.span}: steps {item.steps[0]}-{item.steps[-1]} ==")
    for step, part, m in expand_messages(history, item, config):
        parts.append(f"== step {step} {part} ({m.get('role')}) ==")
        parts.append(content_text(m.get("content")))
        content = m.get("content")
        for p in content if isinstance(content, list) else ():
            if isinstance(p, dict) and not isinstance(p.get("text"), str):  # refusal, image, ...: as recorded
                parts.append(f"(part {p.get('type')}: {json.dumps(p, ensure_ascii=False, sort_keys=True)})")
        calls = m.get("tool_calls") or []
        sent = call_lines(history.step(step).reply) if call_lines is not None and calls and part == "reply" else None
        if sent is not None and len(sent) == len(calls):
            parts.extend(sent)
        else:
            parts.extend(call_line(str((c.get("function") or {}).get("name")), (c.get("function") or {}).get("arguments")) for c in calls)
    return "\n".join(parts)


def pinned_items(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """What the user's pin records (``pin_record``; ``Pin.record()`` too) leave pinned, by the
    label each was pinned as, in the order first pinned."""
    state: dict[str, str] = {}
    for r in records:
        target = str(r.get("target"))
        if r.get("on", True) is not False:
            state.setdefault(target, str(r.get("item") or target))
        else:
            state.pop(target, None)
    return list(state.values())


def pin_record(history: History, item: str, *, on: bool, where: str = "", config: Config | None = None) -> dict[str, Any]:
    """The record (``Pin.record()`` plus the item's label and the time) that pins or unpins ``item``
    from the call after the history's last step. The history is not changed; an unknown item, or
    unpinning what is not pinned, is an ``ItemError``."""
    it = resolve(history, item, config, where=where)
    if not on and it.target not in pinned_items(p.record() for p in history.pins):
        raise ItemError(f"{where + ': ' if where else ''}{it.label} is not pinned")
    return {**Pin(it.target, len(history), on).record(), "item": it.label, "time": round(time.time(), 3)}
