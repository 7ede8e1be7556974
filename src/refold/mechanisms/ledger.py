"""The object ledger (seed 002): every output is a typed object the agent may fold, drop or expand.

An object is one observation of a step: id ``7`` (or ``7.2`` for the second output of step 7),
a kind (file, search, command, test, edit, error, context), a one-line summary built without a
model call (PROGRESS line, command, file outline) and created / last-touched steps. ``fold``
and ``drop`` take effect at the next boundary move; nothing is deleted, ``expand`` shows any
object again as first shown and ``search_ledger`` ranks all of them (BM25, no dependencies).
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from ..policy import Settings
from ..protocol import CM, ContextCommand
from ..shell_paths import paths_overlap
from ..types import Answer, Outcome, Step
from .spans import answer, take_recorded
from .summary_wrap import command_line, unwrap

LEDGER_OPS = ("fold", "drop")
_ID = re.compile(r"^\[?(?:step\s*)?(\d{1,9})(?:\.(\d{1,9}))?\]?$", re.IGNORECASE)  # bounded: no int() of 5000 digits
_REPLY_ID = re.compile(r"^\[?r(\d{1,9})\]?$", re.IGNORECASE)  # r7: the reply of step 7
_RANGE = re.compile(r"(\d+)\s*,\s*(\d+)\s*p|view_range\D*(\d+)\D+(\d+)")
_HEAD = re.compile(r"\bhead\s+(?:-n\s*)?-?(\d+)")
_ERROR = re.compile(r"<returncode>\s*[1-9]\d*\s*</returncode>|Traceback \(most recent call last\)|command not found|No such file or directory")
_WORD = re.compile(r"\w+")


class LedgerPolicy(Settings):
    """Switches of the ledger and the budget signal."""

    section: ClassVar[str] = "ledger"

    enabled: bool = True
    """Honor fold/drop in the rendering (off: they are ordinary steps)."""
    budget_tokens: int | None = Field(default=None, ge=1)
    """Show ``[context-manager] context: N% of <budget>`` with each new output (None: off)."""
    chars_per_token: float = Field(default=4.0, gt=0)
    """How the budget line estimates tokens from characters (no tokenizer in the render loop)."""
    unrecorded_tokens: int = Field(default=0, ge=0)
    """Tokens every request carries that the history does not hold (a Claude Code or Codex log's
    system prompt and tool schemas, which ``refold replay`` ESTIMATES): the budget line counts them,
    as the model reads them. 0 when the history holds its whole prompt (a proxy's, a mini run's)."""
    search_results: int = Field(default=8, ge=1)
    prompt: bool = False
    """Add the ledger section to the system prompt (``protocol.ledger_section``)."""
    objects: bool = False
    """Teach replies as objects (``r7``) and ``pin``/``unpin`` in the ledger section, and offer
    those tools (the commands are answered either way)."""
    pin_plans: bool = False
    """Pin the latest plan the agent wrote (``objects.plan_text``): never masked, folded or compacted."""
    view: bool = False
    """End every prompt with the ledger view (one synthetic user message; it costs its own size)."""
    view_items: int = Field(default=20, ge=1)
    """Objects the view lists by line (pinned and most recently touched first; the rest counted)."""


DEFAULT_LEDGER = LedgerPolicy()


@dataclass(frozen=True, slots=True)
class LedgerObject:
    id: str
    step: int
    sub: int  # index of the observation in its step
    kind: str  # file | search | command | test | edit | error | context
    path: str | None
    lines: tuple[int, int] | None
    command: str
    body: str
    progress: str | None
    tool: str = "bash"  # the tool that ran ``command`` (a function tool's ``command`` is its JSON arguments)


def object_id(step: int, sub: int, count: int) -> str:
    return str(step) if count <= 1 else f"{step}.{sub + 1}"


def parse_ids(argument: str) -> list[tuple[int, int | None]]:
    """``7`` / ``7.2`` / ``7 8.1`` / ``[step 7]`` / ``r7`` -> (step, sub): sub None = every output,
    -1 = the reply (``r7``). [] if not ids."""
    words = re.sub(r"(?i)\[?\bstep\b\s*", "", argument).replace(",", " ").split()
    out: list[tuple[int, int | None]] = []
    for w in words:
        r = _REPLY_ID.match(w)
        if r:
            out.append((int(r.group(1)), -1))
            continue
        m = _ID.match(w)
        if not m:
            return []
        out.append((int(m.group(1)), int(m.group(2)) - 1 if m.group(2) else None))
    return out


def objects_of(step: Step) -> list[LedgerObject]:
    """The objects of a step: one per observation, typed from the command that produced it."""
    texts = step.output_texts
    out = []
    for j, body in enumerate(texts):
        action = step.actions[j] if j < len(step.actions) else (step.actions[-1] if step.actions else None)
        command = action.command if action else ""
        if action is None:
            kind, path, lines = ("error" if body.strip() else "command"), None, None
        elif action.context is not None:
            kind, path, lines = "context", None, None
        else:
            info = action.effects
            path = (info.writes or info.reads or (None,))[0]
            kind = "command" if "git commit" in command else {"read": "file"}.get(info.kind, info.kind)
            if kind not in ("edit", "test") and _ERROR.search(body):
                kind = "error"
            lines = _line_range(command, body) if kind == "file" else None
        tool = action.tool if action else "bash"
        out.append(LedgerObject(object_id(step.index, j, len(texts)), step.index, j, kind, path, lines, command, body, step.progress, tool))
    return out


def _line_range(command: str, body: str) -> tuple[int, int]:
    m = _RANGE.search(command)
    if m:
        a, b = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        return int(a), int(b)
    h = _HEAD.search(command)
    printed = unwrap(body).body  # mini's <returncode>/<output> lines are not the file's
    n = printed.count("\n") + 1
    return (1, min(n, int(h.group(1)))) if h else (1, n)


def summary(obj: LedgerObject, limit: int = 220) -> str:
    """One line, no model call: kind, path and lines, what the step did, the command, an outline."""
    where = f" {obj.path}" + (f":{obj.lines[0]}-{obj.lines[1]}" if obj.lines else "") if obj.path else ""
    parts = [f"{obj.kind}{where}"]
    if obj.progress:
        parts.append(obj.progress)
    if obj.command.strip():  # as mask notes name it: 'read_file src/m3.py', not its JSON arguments
        parts.append(f"$ {command_line(obj.tool, obj.command, 100)}")
    if obj.kind == "file":
        names = _outline_names(obj)
        if names:
            parts.append("defines " + ", ".join(names))
    elif obj.kind in ("error", "test"):
        tail = [ln.strip() for ln in re.sub(r"</?\w+>", "", obj.body).splitlines() if ln.strip()]
        if tail:
            parts.append(tail[-1][:100])
    text = " — ".join(" ".join(p.split()) for p in parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _outline_names(obj: LedgerObject) -> list[str]:
    if obj.body.count("\n") < 5:
        return []
    from .. import outline as ol  # lazy: tree-sitter loads only when a file object is summarized

    body = re.sub(r"<returncode>.*?</returncode>\n?|</?(output|stdout|stderr)>\n?", "", obj.body)
    names = []
    for e in ol.outline(body, path=obj.path):
        m = re.search(r"\b(?:class|def|function|func|fn|interface|struct)\s+([\w$]+)", e.signature)
        if e.depth == 0 and m:
            names.append(m.group(1))
    return names[:6]


@dataclass(frozen=True, slots=True)
class Op:
    at: int  # the step that issued it
    kind: str  # fold | drop
    step: int
    sub: int | None  # None: every output of the step


class LedgerBook:
    """The fold/drop operations of a history after its first ``t`` steps (fed with ``observe``)."""

    def __init__(self, policy: LedgerPolicy = DEFAULT_LEDGER) -> None:
        self.policy = policy
        self.ops: list[Op] = []
        self.outputs: list[int] = []  # observations per step
        self.said: dict[int, tuple[int, ...]] = {}  # step -> its user messages (never hidden: not ops' targets)
        self.t = 0
        self._hidden: tuple[tuple[int, int], tuple[tuple[int, int, str], ...]] | None = None  # last answer
        self._states: dict[int, tuple[dict[tuple[int, int], str], tuple[tuple[int, int, str], ...]]] = {}

    def observe(self, step: Step) -> None:
        if self.policy.enabled:
            records = list(step.outcomes)
            for action in step.actions:
                cmd = action.context
                if cmd is not None and cmd.name in LEDGER_OPS:
                    self.apply(cmd, step.index, take_recorded(records, cmd.name))
        self.outputs.append(len(step.observations))
        if step.user_messages:
            self.said[step.index] = step.user_messages
        self.t = step.index

    def apply(self, cmd: ContextCommand, at: int, recorded: Outcome | None = None) -> Answer:
        """Run ``fold`` / ``drop`` issued at step ``at``."""
        ids = parse_ids(cmd.argument)
        error = self._check(ids, at)
        if recorded is not None and recorded.ok is False:
            error = error or "it was refused when issued"
        if error:
            return answer(cmd.name, False, f"{CM} {cmd.name} refused: {error}.")
        said = next((s for s, j in ids if self._said(s, j)), None)
        if said is not None and not (recorded is not None and recorded.ok):  # a recorded answer stands
            what = "its output is a message" if self.outputs[said - 1] == 1 else "that output is a message"
            return answer(cmd.name, False, f"{CM} {cmd.name} refused: {what} to you (from the user or the harness), never hidden.")
        for step, sub in ids:
            self.ops.append(Op(at, cmd.name, step, sub))
        names = " ".join(cmd.argument.split())
        what = "replaced by its one-line summary" if cmd.name == "fold" else "removed (only a marker stays)"
        return answer(
            cmd.name,
            True,
            f"{CM} {names}: {what} from the next context refresh. `expand <id>` shows it again; "
            '`search_ledger "<words>"` finds it.',
            names,
        )

    def _said(self, step: int, sub: int | None) -> bool:
        """Whether the output(s) ``sub`` of ``step`` names are all user messages (``Step.user_messages``)."""
        said = self.said.get(step)
        if not said or sub == -1:
            return False
        return sub in said if sub is not None else len(said) == self.outputs[step - 1]

    def _check(self, ids: list[tuple[int, int | None]], at: int) -> str | None:
        if not ids:
            return "name outputs by id, e.g. `fold 7`, `drop 7.2` or `fold 7 9`"
        for step, sub in ids:
            if not 1 <= step < at or step > len(self.outputs):
                return f"there is no earlier step {step}"
            n = self.outputs[step - 1]
            if sub is not None and sub != -1 and not 0 <= sub < n:
                return f"step {step} has {n} output(s), so there is no {step}.{sub + 1}"
        return None

    def hidden(self, b: int, limit: int) -> tuple[tuple[int, int, str], ...]:
        """(step, output, fold|drop) in effect: issued at a step <= ``limit``, on steps <= ``b``."""
        issued = bisect.bisect_right(self.ops, limit, key=lambda op: op.at)  # ops come in step order
        if self._hidden is not None and self._hidden[0] == (b, issued):
            return self._hidden[1]  # asked at every render: only recomputed when the answer can change
        full = self._in_effect(issued)
        result = full[: bisect.bisect_left(full, (b + 1,))]  # sorted by step: those on steps <= b
        self._hidden = ((b, issued), result)
        return result

    def _in_effect(self, issued: int) -> tuple[tuple[int, int, str], ...]:
        """Every (step, output, kind) the first ``issued`` ops leave, sorted; built on the nearest
        earlier answer kept, so each op is applied about once (a call asks for two limits)."""
        found = self._states.get(issued)
        if found is not None:
            return found[1]
        base = max((n for n in self._states if n <= issued), default=0)
        state = dict(self._states[base][0]) if base else {}
        for op in self.ops[base:issued]:
            subs = range(self.outputs[op.step - 1]) if op.sub is None else (op.sub,)
            for j in subs:
                state[(op.step, j)] = op.kind
        if len(self._states) >= 4:
            self._states.pop(min(self._states))
        entry = self._states[issued] = (state, tuple(sorted((s, j, k) for (s, j), k in state.items())))
        return entry[1]


def hidden_text(obj: LedgerObject, kind: str, *, reversible: bool = True) -> str:
    """What replaces a folded or dropped output."""
    hint = f" `expand {obj.id}` (or `restore {obj.step}`) shows it." if reversible else ""
    if kind == "drop":
        return f"[step {obj.step}]\n{CM} Output {obj.id} dropped.{hint}"
    return f"[step {obj.step}]\n{CM} Output {obj.id} folded: {summary(obj)}.{hint}"


def hidden_outputs(
    step: Step, gone: dict[tuple[int, int], str], cache: dict[tuple[int, int, str], str], *, reversible: bool
) -> list[tuple[int, str]]:
    """(output index, text) for the outputs of ``step`` folded or dropped in ``gone``; texts cached
    (a folded reply, key (step, -1), is ``objects.hidden_reply``'s)."""
    out = []
    for obj in objects_of(step):
        kind = gone.get((step.index, obj.sub))
        if kind is None:
            continue
        key = (step.index, obj.sub, kind)
        if key not in cache:
            cache[key] = hidden_text(obj, kind, reversible=reversible)
        out.append((obj.sub, cache[key]))
    return out


def budget_line(chars: int, policy: LedgerPolicy) -> str:
    return budget_lines(policy)(chars)


def budget_lines(policy: LedgerPolicy) -> Callable[[int], str]:
    """``budget_line(chars, policy)`` as a function of ``chars`` alone (the renderer's, once per call)."""
    budget = policy.budget_tokens or 1
    per_token = policy.chars_per_token
    extra = policy.unrecorded_tokens
    size = f"{budget // 1000}k" if budget >= 1000 and budget % 1000 == 0 else str(budget)
    head, tail = f"{CM} context: ", f"% of {size} tokens"
    return lambda chars: f"{head}{round(100 * (chars / per_token + extra) / budget)}{tail}"


def last_touched(steps: list[Step], obj: LedgerObject) -> int:
    """The last step that read or edited the object's file, or named its id (created step otherwise)."""
    last = obj.step
    for s in steps[obj.step :]:
        for a in s.actions:
            cmd = a.context
            if cmd is not None:
                if any(step == obj.step for step, _ in parse_ids(cmd.argument)):
                    last = s.index
                continue
            if obj.path and obj.path not in (".", "/"):
                info = a.effects
                if any(paths_overlap(obj.path, p) for p in (*info.reads, *info.writes)):
                    last = s.index
    return last


# ---- search ----------------------------------------------------------------------------------


def tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def bm25(docs: list[str], query: str, k1: float = 1.2, b: float = 0.75) -> list[tuple[float, int]]:
    """(score, doc index) of the documents matching ``query``, best first (ties: earlier first)."""
    terms = list(dict.fromkeys(tokens(query)))
    if not terms or not docs:
        return []
    counts = [Counter(tokens(d)) for d in docs]
    lengths = [sum(c.values()) for c in counts]
    avg = sum(lengths) / len(lengths) or 1.0
    n = len(docs)
    df = {q: sum(1 for c in counts if q in c) for q in terms}
    scored = []
    for i, c in enumerate(counts):
        score = 0.0
        for q in terms:
            f = c.get(q, 0)
            if f:
                idf = math.log(1 + (n - df[q] + 0.5) / (df[q] + 0.5))
                score += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * lengths[i] / avg))
        if score > 0:
            scored.append((score, i))
    return sorted(scored, key=lambda x: (-x[0], x[1]))


def best_line(text: str, query: str, limit: int = 140) -> str:
    terms = set(tokens(query))
    best, score = "", 0
    for line in text.splitlines():
        s = len(terms & set(tokens(line)))
        if s > score:
            best, score = line.strip(), s
    return best if len(best) <= limit else best[: limit - 1] + "…"
