"""Why hidden content is needed again: the hidden-then-needed calls of a replay, counted per cause.

    python benchmarks/bench_needed_causes.py DIR... [--policies default,masking] [--cache anthropic]

For every call a policy's prompt makes hidden-then-needed (``refold.lab.replay.needed``), each key
the recorded reply names that the prompt hid is read back to where it came from:

* **source**: the latest recorded piece that held it (one ``restore`` of its step suffices): an
  output, by the tool that made it (``Read``, ``Grep``, ``Glob``, ``Task``, ``WebFetch``, ... or
  ``shell <kind>``: a shell command by what its output was, ``read``/``search``/``listing``/``test``/
  ...), or the agent's own reply (its ``text`` or the arguments of its ``tool calls``);
* **hidden as**: how the prompt showed that piece: ``masked`` (a one-line note), ``stub``,
  ``trimmed``, ``reply condensed``, ``folded`` (in a fold/span note), or ``gone`` (not in the
  prompt: compacted, dropped);
* **named in**: where the reply names it: its text, or a tool call's argument (``Edit.old_string``,
  ``Write.content``, ``Read.file_path``, ``bash.command``, ...);
* **could a note carry it**: ``listed path`` (a path a listing or a search printed at the start of
  a line: its note names the first few), ``definition`` (a name a read's outline holds: its note
  names the first few), ``in a subagent's report`` (a Task's answer: its note names its subject,
  first files and last line), else ``content`` (a name inside code or prose: no one-line note
  holds it);
* **age**: steps between the hidden piece and the call;
* **also**: whether the prompt shows the key in another form the measure does not read as it (a
  possible false positive): verbatim inside other text, as a folder of a shown path, its basename
  alone, an identifier in another spelling;
* **edit**: for a key an ``Edit`` names, whether the hidden piece was a read of the file edited (an
  exact ``old_string`` needs the file's text: no note, only the read, holds it);
* **in use**: whether one of the agent's 3 replies before the call named a key of the hidden piece
  (it was still using that output when it was hidden: a policy could hold it).

Counts are of keys and of calls (``any``: calls with at least one key of that cause; ``only``:
calls all of whose keys have it, i.e. the calls that cause alone makes needed). Derived figures
only: no text of the runs is printed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from refold.history import History
from refold.lab.replay.needed import NeededIndex, ShownKeys
from refold.lab.replay.paths import collect_paths
from refold.lab.replay.policies import STALE_POLICIES, make_projector
from refold.lab.replay.projectors import Options
from refold.lab.replay.settings import Settings
from refold.lab.replay.stale import with_stale
from refold.loaders import load_all
from refold.mechanisms.summary import summarize
from refold.messages import action_of
from refold.named_keys import keys_of, message_text, strings_in
from refold.outline import outline, strip_line_numbers
from refold.types import Message, Origin, Shown, Step

LISTING_KINDS = frozenset({"listing", "search"})
SUBAGENT_TOOLS = frozenset({"Task", "Agent"})


@dataclass(frozen=True, slots=True)
class KeyCause:
    key: str
    kind: str  # path | identifier | test id | error
    source: str
    hidden_as: str
    named_in: str
    carry: str
    age: str
    also: str
    edit: str
    in_use: str


def key_kind(key: str) -> str:
    if "::" in key:
        return "test id"
    if re.search(r"(?:Error|Exception): ", key):
        return "error"
    if "/" in key or re.search(r"\.[A-Za-z0-9]{1,8}$", key):
        return "path"
    return "identifier"


def _tool_args(reply: Message) -> Iterable[tuple[str, str, str]]:
    """(tool name, argument name, string value) of each string argument of the reply's tool calls."""
    for call in reply.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            continue
        name = str(fn.get("name") or "?")
        args = fn.get("arguments")
        try:
            data = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            data = {"(raw)": args}
        if isinstance(data, dict):
            for arg, value in data.items():
                for s in strings_in(value):
                    yield name, str(arg), s
        elif isinstance(args, str):
            yield name, "(raw)", args


def named_in(reply: Message, key: str) -> str:
    from refold.types import content_text

    if key in keys_of(content_text(reply.get("content"))):
        return "text"
    for tool, arg, value in _tool_args(reply):
        if key in keys_of(value):
            return f"{tool}.{arg}"
    return "text"  # a bash block of a text-based run


def source_of(step: Step, j: int, key: str) -> str:
    if j == 0:
        if any(key in keys_of(v) for _, _, v in _tool_args(step.reply)):
            return "reply: tool call"
        return "reply: text"
    if j - 1 in step.user_messages:
        return "user message"
    action = action_of(step, j - 1)
    if action is None:
        return "output (no call)"
    if action.tool in ("bash", "shell", "execute_bash", "run"):
        kind = summarize(action.command, step.output_texts[j - 1], action.tool).kind
        if kind != "output":
            return f"shell {kind}"
        # an output no summary reads (a tracker's issue, a script's print): by the program that printed it
        words = [
            w
            for w in re.split(r"[\s;&|()]+", action.command)
            if w and "=" not in w and w not in ("cd", "sudo")
        ]
        return f"shell output: {words[0].rsplit('/', 1)[-1][:12] if words else '?'}"
    return action.tool if not action.tool.startswith("mcp__") else "mcp tool"


def carry_of(step: Step, j: int, key: str, kind: str, source: str) -> str:
    if j == 0:
        return "content"
    if source in SUBAGENT_TOOLS:
        return "in a subagent's report"
    text = step.output_texts[j - 1]
    action = action_of(step, j - 1)
    listing = source in ("Glob", "Grep") or source.removeprefix("shell ") in LISTING_KINDS
    if kind == "path" and listing and _on_listing_line(text, key):
        return "listed path"
    if kind == "identifier" and _in_outline(text, key, action.command if action else ""):
        return "definition"
    return "content"


def _on_listing_line(text: str, key: str) -> bool:
    """Whether ``key`` is the path a line of a listing starts with (``path`` or ``path:12:...``)."""
    base = key.rsplit("/", 1)[-1]
    for line in text.split("\n"):
        head = re.split(r"[:\s]", line.strip(), maxsplit=1)[0]
        if head.endswith(base) and key in keys_of(head):
            return True
    return False


def _in_outline(text: str, key: str, command: str) -> bool:
    if key not in text[:200_000]:
        return False
    code, _ = strip_line_numbers(text[:200_000])
    m = re.search(r'"file_path"\s*:\s*"([^"]+)"', command)
    try:
        entries = outline(code, path=m.group(1) if m else None, max_entries=200)
    except Exception:  # noqa: BLE001 - an outline is best effort here as in the notes
        return False
    return any(key in e.signature for e in entries)


def edit_of(reply: Message, key: str, step: Step, j: int) -> str:
    """For a key an edit names: whether the hidden piece was a read of the edited file."""
    where = named_in(reply, key)
    if not where.split(".")[0].endswith("Edit"):
        return "not an edit"
    edited = {v for tool, arg, v in _tool_args(reply) if arg in ("file_path", "path", "notebook_path")}
    action = action_of(step, j - 1) if j else None
    read = action.effects.reads if action else ()
    if action and action.tool == "Read":
        m = re.search(r'"file_path"\s*:\s*"([^"]+)"', action.command)
        read = (m.group(1),) if m else read
    same = any(e == r or e.endswith("/" + r.lstrip("./")) for e in edited for r in read)
    return "edit of the file read" if same else "edit of another file"


def in_use(index: NeededIndex, t: int, piece: tuple[int, int]) -> str:
    """Whether one of the 3 replies before the call named a key of the hidden piece."""
    held = (
        keys_of(message_text(index.history.steps[piece[0] - 1].observations[piece[1] - 1]))
        if piece[1]
        else None
    )
    if held is None:
        held = keys_of(message_text(index.history.steps[piece[0] - 1].reply))
    recent = index._replies[max(piece[0], t - 3) : t]  # replies of the steps after the piece, up to the call
    return "named in the last 3 replies" if any(r & held for r in recent) else "not named since"


def shown_pieces(messages: Sequence[Message], origins: Sequence[Origin]) -> dict[tuple[int, int], Origin]:
    """How each recorded piece ``(step, j)`` is laid out in a prompt (as ``ShownKeys`` lays them out)."""
    out: dict[tuple[int, int], Origin] = {}
    nxt: dict[int, int] = {}
    for o in origins:
        if o.step is None or o.part not in ("reply", "output"):
            continue
        j = 0 if o.part == "reply" else nxt.get(o.step, 1)
        if o.part == "output":
            nxt[o.step] = j + 1
        out[(o.step, j)] = o
    return out


def hidden_as(piece: tuple[int, int], shown: dict[tuple[int, int], Origin], origins: Sequence[Origin]) -> str:
    o = shown.get(piece)
    if o is None:
        folded = any(piece[0] in x.covers for x in origins if x.part not in ("reply", "output"))
        return "folded" if folded else "gone"
    if o.shown == Shown.STUB:
        return "stub"
    if o.shown == Shown.TRIMMED:
        return "trimmed"
    if o.shown == Shown.NOTE:
        return "reply condensed" if piece[1] == 0 else "masked"
    return o.shown.value


@dataclass(slots=True)
class Tally:
    calls: int = 0
    needed: int = 0
    keys: dict[str, Counter[str]] = field(default_factory=lambda: {d: Counter() for d in DIMENSIONS})
    any: dict[str, Counter[str]] = field(default_factory=lambda: {d: Counter() for d in DIMENSIONS})
    only: dict[str, Counter[str]] = field(default_factory=lambda: {d: Counter() for d in DIMENSIONS})

    def add_call(self, causes: list[KeyCause]) -> None:
        for d in DIMENSIONS:
            values = [getattr(c, d) for c in causes]
            self.keys[d].update(values)
            self.any[d].update(set(values))
            if len(set(values)) == 1:
                self.only[d][values[0]] += 1


DIMENSIONS = ("source", "hidden_as", "named_in", "carry", "kind", "age", "also", "edit", "in_use")
AGES = ((2, "1-2 steps"), (5, "3-5 steps"), (10, "6-10 steps"), (20, "11-20 steps"))


def age_of(t: int, s: int) -> str:
    return next((label for n, label in AGES if t + 1 - s <= n), "over 20 steps")


def _norm(key: str) -> str:
    return re.sub(r"[_\-]", "", key).lower()


def also_shown(key: str, kind: str, prompt_keys: frozenset[str], prompt_text: str) -> str:
    """Whether the prompt shows the key in another form (a possible false positive of the measure)."""
    if key not in prompt_text:  # the usual case: no form of it at all
        pass
    elif kind == "path" and re.search(rf"(?<![\w.-]){re.escape(key)}/", prompt_text):
        return "directory of a shown path"
    elif re.search(rf"(?<![\w.-]){re.escape(key)}(?![\w-])", prompt_text):
        return "verbatim, not read as a key"
    if kind == "path":
        base = key.rsplit("/", 1)[-1]
        if base != key and base in prompt_keys:
            return "its basename shown"
    if kind == "identifier":
        n = _norm(key)
        if any(_norm(k) == n for k in prompt_keys):
            return "another case shown"
    return "no"


def analyse(h: History, policy: str, settings: Settings, index: NeededIndex, tally: Tally, opts: Options | None = None) -> None:
    opts = opts or settings.options()
    marked = with_stale(h, settings.stale) if policy in STALE_POLICIES else h
    view = ShownKeys(index)
    for p in make_projector(policy, opts).prompts(marked):
        tally.calls += 1
        found = index.check(p.t, p.messages, p.origins, view)
        if found is None:
            continue
        tally.needed += 1
        shown = shown_pieces(p.messages, p.origins)
        text = "\n".join(message_text(m) for m in p.messages)
        pkeys = keys_of(text)
        reply = h.steps[p.t].reply
        causes = []
        for key in found.keys:
            where = [w for w in index._where.get(key, []) if w[0] <= p.t]
            latest = [w for w in where if w[0] == where[-1][0]]
            s, j = next((w for w in latest if w[1] > 0), latest[0])  # an output before the reply
            step = h.steps[s - 1]
            kind = key_kind(key)
            source = source_of(step, j, key)
            causes.append(
                KeyCause(
                    key,
                    kind,
                    source,
                    hidden_as((s, j), shown, p.origins),
                    named_in(reply, key),
                    carry_of(step, j, key, kind, source),
                    age_of(p.t, s),
                    also_shown(key, kind, pkeys, text),
                    edit_of(reply, key, step, j),
                    in_use(index, p.t, (s, j)),
                )
            )
        tally.add_call(causes)


def report(tally: Tally, policy: str) -> list[str]:
    rate = tally.needed / tally.calls if tally.calls else 0.0
    lines = [
        f"{policy}: {tally.needed} of {tally.calls} calls hidden-then-needed ({rate:.1%}), "
        f"{sum(tally.keys['kind'].values())} keys"
    ]
    for d in DIMENSIONS:
        lines.append(f"  by {d.replace('_', ' ')}:{'':<14s}{'keys':>7s} {'calls any':>10s} {'only':>6s}")
        for value, n in tally.keys[d].most_common():
            lines.append(f"    {value:<28s}{n:>7d} {tally.any[d][value]:>10d} {tally.only[d][value]:>6d}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--policies", default="default,masking")
    ap.add_argument("--cache", default="anthropic")
    ap.add_argument("--mask-by", default=None, help="Policy.mask_by for refold's policies (default: the library's)")
    a = ap.parse_args(argv)
    start = time.perf_counter()
    policies = [p for p in a.policies.split(",") if p]
    settings = Settings(policies=tuple(policies), cache=a.cache)
    settings.check()
    opts = settings.options()
    if a.mask_by:
        opts = replace(opts, policy_overrides={**opts.policy_overrides, "mask_by": a.mask_by})
    tok = opts.tokenizer
    tallies = {p: Tally() for p in policies}
    files = collect_paths(a.paths)
    sessions = 0
    for f in files:
        try:
            histories = load_all(f)
        except Exception as e:  # noqa: BLE001 - as replay, a file it cannot read is reported and skipped
            print(f"skip {f}: {e}", file=sys.stderr)
            continue
        for h in histories:
            sessions += 1
            index = NeededIndex(h, tok)
            for p in policies:
                analyse(h, p, settings, index, tallies[p], opts)
    print(
        f"# python benchmarks/bench_needed_causes.py {' '.join(a.paths)} --policies {a.policies} --cache {a.cache}"
        + (f" --mask-by {a.mask_by}" if a.mask_by else "")
    )
    print(
        f"# {len(files)} files, {sessions} sessions; keys: refold.named_keys; "
        f"'any': calls with such a key, 'only': calls whose every needed key is such"
    )
    for p in policies:
        print()
        print("\n".join(report(tallies[p], p)))
    print(f"\n({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
