"""What a replay report says about the request prefix a log leaves out (replay/prefix.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...formats.claude_code import FORMAT as CLAUDE_CODE
from ...formats.codex import FORMAT as CODEX
from .prefix import PREFIX_FORMATS
from .runner import TaskResult

__all__ = ["HOW", "MISSING", "not_read_notes", "partial_notes", "prefix_notes", "prefix_summary", "subagent_notes"]

MISSING = {
    CLAUDE_CODE: "Claude Code: the system prompt and tool schemas Claude Code sent are not in its log",
    CODEX: "Codex: the tool schemas Codex sent (and its system prompt where no base_instructions are recorded) are not in its rollout",
}
HOW = (
    "fitted per session on the provider's recorded usage: recorded prompt tokens = prefix + ratio x base's "
    "count of the call's messages (ratio 1 in the provider's tokenizer where refold ships it, else the "
    "Theil-Sen slope; prefix the median over the calls, clipped at 0, in replay-tokenizer tokens)"
)
_LISTED = 4  # sessions named one by one; more are given as a range
ROUGH = 0.1
"""A fit whose median residual exceeds this share of the median recorded prompt is called rough:
on the real logs checked, Claude Code's stay under 2% and an unredacted Codex rollout's at 6%,
while redacted ones (outputs replaced by placeholders) reach 20-55%."""


def _session(r: TaskResult) -> str:
    name = r.file.rsplit("#", 1)[1] if "#" in r.file else Path(r.file).name
    return f"{name} {int((r.prefix or {}).get('tokens_per_call', 0)):,}"


def prefix_notes(results: Sequence[TaskResult], enabled: bool) -> list[str]:
    """One note per format whose logs leave out part of each request: the estimate and how it
    was made, or that counts are of the messages only (no usage recorded, or turned off)."""
    notes: list[str] = []
    for fmt in (CLAUDE_CODE, CODEX):
        rs = [r for r in results if r.format == fmt]
        if not rs:
            continue
        done = [r for r in rs if r.prefix is not None]
        if not enabled:
            notes.append(f"{MISSING[fmt]}: counts are of the messages only (--no-prefix-estimate).")
            continue
        if not done:
            notes.append(f"{MISSING[fmt]}: counts are of the messages only (no usage recorded to estimate them from).")
            continue
        sizes = [int((r.prefix or {}).get("tokens_per_call", 0)) for r in done]
        each = (
            "; ".join(_session(r) for r in done)
            if len(done) <= _LISTED
            else f"{min(sizes):,}-{max(sizes):,} over {len(done)} sessions"
        )
        rest = len(rs) - len(done)
        tail = f" {rest} session(s) record no usage: their counts are of the messages only." if rest else ""
        tail += _rough(done)
        notes.append(
            f"{MISSING[fmt]}: every call of every policy starts with an ESTIMATED prefix standing for them "
            f"(tokens per call: {each}), {HOW}; the same at every call, so a cache holds it after the first. "
            f"--no-prefix-estimate counts the messages only.{tail}"
        )
    return notes


def _rough(done: Sequence[TaskResult]) -> str:
    """Say when one constant explains a session's recorded prompts poorly: its log then misses
    something sent that varies from call to call, and the estimate (and base) cannot be trusted."""
    bad = []
    for r in done:
        p = r.prefix or {}
        rec = int(p.get("recorded_median") or 0)
        if rec > 0 and int(p.get("residual_median") or 0) > ROUGH * rec:
            bad.append((r, int(p["residual_median"]) / rec))
    if not bad:
        return ""
    names = ", ".join(f"{Path(r.file).name} {share:.0%}" for r, share in bad[:_LISTED])
    more = f" and {len(bad) - _LISTED} more" if len(bad) > _LISTED else ""
    return (
        f" ROUGH FIT in {len(bad)} session(s) ({names}{more}: median per-call residual / median recorded prompt): "
        "the log misses something sent that varies from call to call (redacted outputs, unlogged reasoning or "
        "attachments), so their ESTIMATED prefix is unreliable and base undercounts them; compare Recorded usage."
    )


def prefix_summary(results: Sequence[TaskResult]) -> dict[str, Any] | None:
    """The report's ``unrecorded_prefix``: over the sessions that got an estimate (None: none did)."""
    done = [r for r in results if r.prefix is not None and r.format in PREFIX_FORMATS]
    if not done:
        return None
    sizes = [int((r.prefix or {}).get("tokens_per_call", 0)) for r in done]
    base = [int(r.policies["base"].get("unrecorded_prefix_tokens", 0)) for r in done if "base" in r.policies]
    out: dict[str, Any] = {
        "estimated": True,
        "sessions": len(done),
        "tokens_per_call_min": min(sizes),
        "tokens_per_call_max": max(sizes),
        "how": HOW,
    }
    if base:
        out["base_prompt_tokens"] = sum(base)
    return out


def not_read_notes(results: Sequence[TaskResult]) -> list[str]:
    """One note naming what the logs hold that was not read (kinds a newer harness writes): the
    counts leave it out, so the user is told rather than shown smaller figures without a word."""
    files: set[str] = set()
    total: dict[str, int] = {}
    for r in results:
        if not r.not_read:
            continue
        first = (r.path or r.file) not in files
        files.add(r.path or r.file)
        for k, n in r.not_read.items():
            if first or not k.endswith(" line"):  # a line kind is counted over the file: once per file
                total[k] = total.get(k, 0) + n
    if not files:
        return []
    what = ", ".join(f"{n:,} {k}{'s' if n > 1 else ''}" for k, n in sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))
    return [
        f"Not read, not counted: {what} in {len(files)} file(s) (kinds this refold does not know, e.g. from a "
        f"newer harness version; `not_read` per task in --json)."
    ]


def partial_notes(results: Sequence[TaskResult]) -> list[str]:
    """One note per file that lacks what its format always holds (a rollout without its first
    line): it was read all the same, and its counts leave that part out (the ESTIMATED prefix,
    where there is one, stands for a missing system prompt)."""
    said: dict[str, list[str]] = {}
    for r in results:
        if r.partial:
            said.setdefault(r.path or r.file, list(r.partial))
    return [f"Partial file: {f}: {'; '.join(why)}." for f, why in said.items()]


def subagent_notes(results: Sequence[TaskResult]) -> list[str]:
    """Name the subagents a replayed Claude Code log ran whose own log was not replayed: their
    calls are missing from every total, which nothing else would show."""
    read = {Path(r.path or r.file).name for r in results}
    missing: dict[str, list[str]] = {}
    for r in results:
        for agent in r.subagents:
            if f"agent-{agent}.jsonl" not in read and f"agent-{agent}.jsonl.gz" not in read:
                missing.setdefault(r.path or r.file, [])
                if agent not in missing[r.path or r.file]:
                    missing[r.path or r.file].append(agent)
    if not missing:
        return []
    notes = []
    beside: dict[str, list[str]] = {}
    absent: dict[str, list[str]] = {}
    for f, agents in missing.items():
        for a in agents:
            (beside if _subagent_log(f, a) else absent).setdefault(f, []).append(a)
    if beside:
        notes.append(
            f"Subagents not replayed: {_named(beside)} ran in their own log, not named ({_example(beside)}): "
            "their calls are in no total; name the project folder to include them."
        )
    if absent:  # naming a folder would not help: the logs are not on this disk
        notes.append(
            f"Subagents not found: {_named(absent)} ran in their own log, not beside it ({_example(absent)}, "
            "no such file): their calls are in no total."
        )
    return notes


def _subagent_log(file: str, agent: str) -> bool:
    """Whether Claude Code's log of subagent ``agent`` is beside session log ``file``: in
    ``<session>/subagents/`` (2.1.x) or next to it (older versions)."""
    p = Path(file)
    folders = (p.parent / p.name.removesuffix(".gz").removesuffix(".jsonl") / "subagents", p.parent)
    return any((f / f"agent-{agent}.jsonl{gz}").is_file() for f in folders for gz in ("", ".gz"))


def _named(missing: dict[str, list[str]]) -> str:
    return f"{sum(len(a) for a in missing.values())} subagent(s) of {len(missing)} session log(s)"


def _example(missing: dict[str, list[str]]) -> str:
    file, agents = next(iter(missing.items()))
    stem = Path(file).name.removesuffix(".gz").removesuffix(".jsonl")
    return f"e.g. {Path(file).name}: {', '.join('agent-' + a for a in agents[:4])}, in {stem}/subagents/"
