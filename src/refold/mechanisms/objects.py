"""Every entity an object (seed 002): tool outputs and the agent's own replies.

    id     "7" / "7.2"  an output of step 7 (kinds: file, search, command, test, edit, error, context)
           "r7"         the reply of step 7 (kinds: thought, plan, result)

Each object carries the seed's fields: ``kind``, ``tool``, ``args``, ``summary``, ``body``,
``created_at_turn`` and ``last_touched_turn``. A reply is a ``plan`` when it (or a part of it) states
a plan or a task list, a ``result`` when it submits the work or gives the final answer, else a
``thought``; all of it is read from the text, without a model call. ``ObjectIndex`` builds them once
per step and keeps the last-touched turns up to date as steps arrive, so the ledger view costs
O(objects) per call, not O(steps^2).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..protocol import CM
from ..reply_command import bash_block
from ..types import Step
from .ledger import LedgerObject, objects_of, parse_ids, summary
from .recency import Recency

_PLAN_HEAD = re.compile(
    r"^\W*(?:(?:my|the|updated|new|revised)\s+)?(?:plan|approach|next steps|steps|todo|to-do|to do|task list|tasks)"
    r"\b[^\n]{0,40}:\s*(?:\*\*)?\s*$",
    re.IGNORECASE,
)
_INTENT = re.compile(r"\b(?:i will|i'll|i am going to|i'm going to|i need to|i should|let me|we need to|the plan is)\b[^\n]*:\s*$", re.IGNORECASE)
_ITEM = re.compile(r"^\s*(?:\d{1,2}[.)]|[-*+]|\[[ xX]\]|[-*+]\s+\[[ xX]\])\s+(\S.*)$")
_CHECKBOX = re.compile(r"^\s*[-*+]?\s*\[[ xX]\]\s+\S")
_VERBS = frozenset(
    ["add", "apply", "check", "confirm", "create", "delete", "edit", "examine", "find", "fix", "identify", "implement", "inspect", "investigate", "locate", "look", "modify", "read", "refactor", "remove", "replace", "reproduce", "rerun", "review", "run", "search", "submit", "test", "understand", "update", "verify", "write", "open", "compare", "move", "rename", "handle", "ensure", "make", "change", "patch", "clean"]
)
_SUBMIT = re.compile(
    r"COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT|MINI_SWE_AGENT_FINAL_OUTPUT|^\s*submit\b|\bgit diff --cached\b\s*$",
    re.MULTILINE,
)
_FINAL = re.compile(r"^\W*(?:final answer|answer|summary of (?:the )?changes|the fix is complete)\b", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Obj:
    """One ledger object with the seed's fields (``body`` is the object's text as first shown)."""

    id: str
    step: int
    sub: int  # -1: the reply; else the index of the output in its step
    kind: str
    tool: str
    args: Mapping[str, Any] = field(compare=False)
    summary: str
    body: str
    created_at_turn: int
    last_touched_turn: int
    path: str | None = None

    def record(self) -> dict[str, Any]:
        """The object as the seed's JSON schema names it."""
        return {
            "id": self.id, "kind": self.kind, "tool": self.tool, "args": dict(self.args), "summary": self.summary,
            "body": self.body, "created_at_turn": self.created_at_turn, "last_touched_turn": self.last_touched_turn,
        }


def reply_id(step: int) -> str:
    return f"r{step}"


# ---- replies -----------------------------------------------------------------------------------


def plan_text(reply: str) -> str | None:
    """The part of a reply that states a plan or a task list, or None.

    A plan is a list of at least two items under a plan heading (``Plan:``, ``Next steps:``, ``TODO:``),
    two or more checkboxes, or an intention line (``I will:``) followed by at least three items that
    each open with a verb. A numbered trace of what the code does is no plan.
    """
    lines = reply.splitlines()
    for i, line in enumerate(lines):
        head = _PLAN_HEAD.match(line.strip())
        intent = _INTENT.search(line.strip()) if head is None else None
        if head is None and intent is None:
            continue
        items = _items(lines, i + 1)
        if head is not None and len(items) >= 2:
            return "\n".join(lines[i : items[-1] + 1]).strip()
        if intent is not None and len(items) >= 3 and all(_verb_first(lines[j]) for j in items):
            return "\n".join(lines[i : items[-1] + 1]).strip()
    boxes = [j for j, ln in enumerate(lines) if _CHECKBOX.match(ln)]
    if len(boxes) >= 2:
        return "\n".join(lines[boxes[0] : boxes[-1] + 1]).strip()
    return None


def _items(lines: list[str], start: int) -> list[int]:
    """Indices of the list items right after ``start`` (blank lines and item continuations allowed)."""
    found: list[int] = []
    j = start
    while j < len(lines) and j < start + 60:
        line = lines[j]
        if _ITEM.match(line):
            found.append(j)
        elif not line.strip():
            if found and j + 1 < len(lines) and not _ITEM.match(lines[j + 1]):
                break
        elif not (found and line.startswith(("  ", "\t"))):
            break
        j += 1
    return found


def _verb_first(line: str) -> bool:
    m = _ITEM.match(line)
    words = re.findall(r"[A-Za-z]+", m.group(1) if m else line)
    return bool(words) and words[0].lower() in _VERBS


def reply_kind(step: Step, *, last: bool = False) -> str:
    """``result`` (submits the work or gives the final answer), ``plan`` or ``thought``."""
    commands = [a.command for a in step.actions]
    text = step.reply_text
    if any(_SUBMIT.search(c) for c in commands) or (last and not commands and _FINAL.search(text)):
        return "result"
    return "plan" if plan_text(text) is not None else "thought"


def reply_object(step: Step, *, last: bool = False) -> Obj:
    """The reply of ``step`` as an object: its tool and arguments are those of its first command."""
    kind = reply_kind(step, last=last)
    text = step.reply_text
    action = step.actions[0] if step.actions else None
    tool = action.tool if action else "reply"
    args = _args(action.command, action.tool) if action else {}
    return Obj(reply_id(step.index), step.index, -1, kind, tool, args, reply_summary(step, kind), text, step.index, step.index)


def reply_summary(step: Step, kind: str, limit: int = 220) -> str:
    """One line, no model call: the kind, the PROGRESS line or first prose line, the command."""
    text = step.reply_text
    if kind == "plan":
        plan = plan_text(text) or ""
        items = [m.group(1).strip() for ln in plan.splitlines() if (m := _ITEM.match(ln))]
        what = f"{len(items)} items: " + "; ".join(items[:3]) + ("; …" if len(items) > 3 else "")
    else:
        what = step.progress or next(
            (ln.strip().removeprefix("THOUGHT:").strip() for ln in text.splitlines()
             if ln.strip() and not ln.strip().startswith(("```", "PROGRESS", "STALE"))),
            "",
        )
    parts = [kind, what] if what else [kind]
    if step.actions and step.actions[0].command.strip():
        parts.append("$ " + step.actions[0].command.strip().splitlines()[0][:100])
    line = " — ".join(" ".join(p.split()) for p in parts if p)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _args(command: str, tool: str) -> dict[str, Any]:
    """A tool call's arguments: the JSON object of a named tool, else ``{"command": ...}``."""
    if tool not in ("bash", "shell", "sh"):
        try:
            value = json.loads(command)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
    return {"command": command}


def output_object(o: LedgerObject, tool: str, last_touched: int) -> Obj:
    return Obj(o.id, o.step, o.sub, o.kind, tool, _args(o.command, tool), summary(o), o.body, o.step, last_touched, o.path)


# ---- the index -----------------------------------------------------------------------------------


class ObjectIndex:
    """Every object of a history's first ``t`` steps (fed in order with ``observe``).

    Objects are built once; ``recency`` follows the steps that read or edited an object's file or
    named its id, so ``last_touched_turn`` stays exact without rescanning the history, and the
    ledger view finds the most recently touched objects without sorting them all at every call.
    """

    def __init__(self) -> None:
        self.outputs: list[list[LedgerObject]] = []  # per step
        self.replies: list[Step] = []
        self.tools: list[list[str]] = []
        self.recency = Recency()
        # each object built once (as first touched): the ledger view lists every step at every call
        self._outputs: dict[str, Obj] = {}
        self._reply_objs: dict[tuple[int, bool], Obj] = {}
        self.t = 0

    def observe(self, step: Step) -> None:
        objs = objects_of(step)
        at = step.index
        recency = self.recency
        for a in step.actions:
            cmd = a.context
            if cmd is not None:
                for s, sub in parse_ids(cmd.argument):
                    if 1 <= s <= self.t:
                        if sub == -1:
                            recency.touch((s, -1), at)
                        else:
                            for o in self.outputs[s - 1]:
                                if sub is None or o.sub == sub:
                                    recency.touch((o.step, o.sub), at)
                continue
            info = a.effects
            for p in {*info.reads, *info.writes}:
                recency.touch_path(p, at)
        self.outputs.append(objs)
        self.replies.append(step)
        self.tools.append([_tool_of(step, o.sub) for o in objs])
        recency.add((at, -1), listed=True)
        for o in objs:
            listed = o.kind != "context"
            grouped = listed and bool(o.path) and o.path not in (".", "/")
            recency.add((at, o.sub), listed=listed, path=o.path if grouped else None)
        self.t = at

    def obj(self, step: int, sub: int, *, last: bool = False) -> Obj:
        """The object ``(step, sub)`` as built when first observed (its created turn as last touched)."""
        if sub == -1:
            reply = self._reply_objs.get((step, last))
            if reply is None:  # replies[step - 1] never changes once observed
                reply = self._reply_objs[(step, last)] = reply_object(self.replies[step - 1], last=last)
            return reply
        o = self.outputs[step - 1][sub]
        found = self._outputs.get(o.id)
        if found is None:
            found = self._outputs[o.id] = output_object(o, self.tools[step - 1][sub], o.step)
        return found

    def objects(self, step: int, *, last: bool = False) -> list[Obj]:
        """The reply object and the output objects of ``step`` (1-based)."""
        out = []
        for sub in range(-1, len(self.outputs[step - 1])):
            o = self.obj(step, sub, last=last)
            out.append(_touched(o, self.recency.last((step, sub))))
        return out

    def all(self, upto: int | None = None) -> Iterable[Obj]:
        n = self.t if upto is None else upto
        for i in range(1, n + 1):
            yield from self.objects(i, last=i == n)


def _touched(o: Obj, turn: int) -> Obj:
    return o if turn == o.last_touched_turn else Obj(
        o.id, o.step, o.sub, o.kind, o.tool, o.args, o.summary, o.body, o.created_at_turn, turn, o.path
    )


def _tool_of(step: Step, j: int) -> str:
    action = step.actions[j] if j < len(step.actions) else (step.actions[-1] if step.actions else None)
    return action.tool if action else "none"


# ---- folded and dropped replies ------------------------------------------------------------------


def hidden_reply_text(step: Step, kind: str, *, reversible: bool = True) -> str:
    """What replaces a folded or dropped reply: one line, then its command kept (what the agent did)."""
    oid = reply_id(step.index)
    hint = f" `expand {oid}` shows it." if reversible else ""
    if kind == "drop":
        head = f"{CM} Reply {oid} dropped.{hint}"
    else:  # the command follows in full, so the summary leaves it out
        what = reply_summary(step, reply_kind(step), limit=140).split(" — $ ", 1)[0]
        head = f"{CM} Reply {oid} folded: {what}.{hint}"
    block = bash_block(step.reply_text)
    return head if block is None else f"{head}\n\n```bash\n{block.strip()}\n```"


def hidden_reply(
    step: Step, gone: Mapping[tuple[int, int], str], cache: dict[tuple[int, int, str], str], *, reversible: bool
) -> str | None:
    """The text standing for ``step``'s reply when ``gone`` folds or drops it (``r7``), else None."""
    kind = gone.get((step.index, -1))
    if kind is None:
        return None
    key = (step.index, -1, kind)
    if key not in cache:
        cache[key] = hidden_reply_text(step, kind, reversible=reversible)
    return cache[key]


# ---- the ledger view ---------------------------------------------------------------------------


def status(
    o: Obj, ops: Iterable[tuple[int, int | None, str]], covered: Mapping[int, str], pinned: frozenset[tuple[int, int]],
    states: Mapping[tuple[int, int], str] | None = None,
) -> str:
    """How an object stands: shown, folded, dropped, in a span, pinned (``ops``: (step, sub, kind));
    ``states``: how each output stands in a rendered prompt (``context.search.prompt_states``)."""
    state = ""
    if states is not None and (o.step, o.sub) in states:
        state = states[(o.step, o.sub)]
        if state == "in span" and o.step in covered:
            state = f"in span {covered[o.step]}"
        if (o.step, o.sub) in pinned and "pinned" not in state:
            state += ", pinned"
        return state
    for step, sub, kind in ops:
        if step == o.step and (sub == o.sub or (sub is None and o.sub >= 0)):
            state = "dropped" if kind == "drop" else "folded"
    if o.step in covered:
        state = (state + ", " if state else "") + f"in span {covered[o.step]}"
    if (o.step, o.sub) in pinned:
        state = (state + ", " if state else "") + "pinned"
    return state or "shown"


def view_lines(
    objs: list[Obj], ops: Iterable[tuple[int, int | None, str]], covered: Mapping[int, str],
    pinned: frozenset[tuple[int, int]], limit: int | None = None, states: Mapping[tuple[int, int], str] | None = None,
) -> tuple[list[str], int]:
    """One line per object (id kind [status] created/last touched: summary), and how many were left
    out: with ``limit``, the pinned objects and the ``limit`` most recently touched are listed."""
    ops = list(ops)
    listed = [o for o in objs if o.kind != "context"]
    if limit is not None and len(listed) > limit:
        recent = sorted(listed, key=lambda o: (o.last_touched_turn, o.step, o.sub), reverse=True)[:limit]
        keep = {o.id for o in recent} | {o.id for o in listed if (o.step, o.sub) in pinned}
        left = len(listed) - len(keep)
        listed = [o for o in listed if o.id in keep]
    else:
        left = 0
    lines = [
        f"{o.id} {o.kind} [{status(o, ops, covered, pinned, states)}] {o.created_at_turn}/{o.last_touched_turn}: {clip(o.summary, 120)}"
        for o in listed
    ]
    return lines, left


def view_text(
    index: ObjectIndex, t: int, spans: Any, ledger: Any, pinned: frozenset[tuple[int, int]], *, everything: bool = False,
    states: Mapping[tuple[int, int], str] | None = None,
) -> str:
    """The ledger view that ends a prompt (``LedgerPolicy.view``): the objects of steps 1..t (up to
    ``view_items`` lines unless ``everything``), the spans, and how to act on them."""
    covered = {i: s.id for s in spans.closed for i in s.covers}
    ops = [(op.step, op.sub, op.kind) for op in ledger.ops if op.at <= t]
    limit = None if everything else ledger.policy.view_items
    lines, left = view_lines(list(index.all(t)), ops, covered, pinned, limit, states)
    out = [f"{CM} Ledger after step {t} (id kind [status] created/last touched: summary):", *lines]
    if left:
        out.append(f"(+{left} older objects not listed: `search_ledger *` lists them all)")
    for span in spans.closed:
        out.append(f"{span.id} span [steps {span.begin}-{span.end}]: {span.question} -> {span.conclusion}")
    for sid in spans.stack:
        out.append(f"{sid} span [open since step {spans.spans[sid].begin}]: {spans.spans[sid].question}")
    out.append("`fold <id>` / `drop <id>` shorten an object, `expand <id>` shows it again, `pin <id>` keeps it shown.")
    return "\n".join(out)


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
