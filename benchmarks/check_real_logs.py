"""Check refold's Claude Code and Codex loaders against real logs: calls found vs calls recorded.

    PYTHONPATH=src python benchmarks/check_real_logs.py DIR [--tokenizer qwen3.6]

For every ``*.jsonl`` under DIR that refold reads as a Claude Code log or a Codex rollout, prints:

* calls: the model calls refold found (stored replies + calls without a stored reply) vs the calls
  the log records (counted here independently of the loader: Claude Code's distinct ``message.id``
  of non-synthetic assistant lines with ``usage``, plus one summarization call per
  ``compact_boundary``; Codex's ``token_count`` events whose running total changed), whether each
  stored reply carries the usage the log gives its response, and the sessions refold made of the
  file (Claude Code's ``subagents/agent-acompact-*.jsonl`` is skipped when its session's log is
  there, as ``refold replay FOLDER`` does: that log's compaction is that call);
* per call, base's re-rendered prompt (replay tokenizer) vs the prompt tokens the provider
  recorded for that call: median and p90 of |base - recorded| / recorded, without and with the
  ESTIMATED unrecorded prefix (``refold.lab.replay.prefix``; fitted on the same calls, so the
  error with it is in-sample), and the prefix per session;
* per call without a stored reply whose prompt size the log records (a compaction's summarization
  call: Claude Code's ``compactMetadata.preTokens``, Codex's usage event), the same comparison for
  the prompt replay rebuilds for it (cut from the prompt after the last step when it was made
  after the last stored reply).

A mismatch in calls is a loader bug or a shape the loader does not know; the error figures show
how far a message-only count is from what was billed, and how much of that the prefix explains.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from refold.errors import RefoldError, TrajectoryError
from refold.json_file import read_json
from refold.lab.replay.paths import collect_paths
from refold.lab.replay.policies import Options, make_projector
from refold.lab.replay.prefix import request_prefix
from refold.lab.replay.recorded_calls import has_trailing_calls, unreplied_prompt
from refold.loaders import detect_format, load_all
from refold.prompt_tokens import PromptTokens
from refold.tokens import get_tokenizer


def log_calls(data: list[Any], fmt: str) -> int:
    """Model calls the log itself records (one usage report each)."""
    if fmt == "claude-code":
        ids: set[str] = set()
        for row in data:
            msg = row.get("message") if isinstance(row, dict) and row.get("type") == "assistant" else None
            if not isinstance(msg, dict) or msg.get("model") == "<synthetic>" or row.get("isApiErrorMessage"):
                continue
            if isinstance(msg.get("usage"), dict):
                ids.add(str(msg.get("id") or row.get("uuid")))
        # each compaction's summarization call: its usage is in subagents/agent-acompact-*.jsonl (2.1.x)
        return len(ids) + sum(1 for row in data if isinstance(row, dict) and row.get("subtype") == "compact_boundary")
    n, last = 0, None
    for row in data:
        p = row.get("payload") if isinstance(row, dict) and row.get("type") == "event_msg" else None
        if isinstance(p, dict) and p.get("type") == "token_count" and isinstance(p.get("info"), dict):
            total = p["info"].get("total_token_usage")
            if total is None or total != last:
                n += 1
            last = total
    return n


def log_usage_by_id(data: list[Any]) -> dict[str, int]:
    """Claude Code: each response's prompt tokens (input + cache reads + cache writes), by message id."""
    out: dict[str, int] = {}
    for row in data:
        msg = row.get("message") if isinstance(row, dict) and row.get("type") == "assistant" else None
        u = msg.get("usage") if isinstance(msg, dict) else None
        if isinstance(u, dict) and isinstance(msg.get("id"), str) and isinstance(u.get("input_tokens"), int):
            out[msg["id"]] = sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    return out


def log_codex_prompts(data: list[Any]) -> list[int]:
    """Codex: each usage event's prompt tokens, in file order (a repeated total once)."""
    out: list[int] = []
    last = None
    for row in data:
        p = row.get("payload") if isinstance(row, dict) and row.get("type") == "event_msg" else None
        if isinstance(p, dict) and p.get("type") == "token_count" and isinstance(p.get("info"), dict):
            total = p["info"].get("total_token_usage")
            if total is not None and total == last:
                continue
            last = total
            lu = p["info"].get("last_token_usage")
            out.append(int(lu.get("input_tokens") or 0) if isinstance(lu, dict) else -1)
    return out


def _ids(data: list[Any], kind: str) -> set[str]:
    """Claude Code: ids of the tool_use (kind ``tool_use``) or tool_result blocks in the log."""
    out: set[str] = set()
    for row in data:
        msg = row.get("message") if isinstance(row, dict) and row.get("type") in ("user", "assistant") else None
        content = msg.get("content") if isinstance(msg, dict) else None
        for b in content if isinstance(content, list) else ():
            if isinstance(b, dict) and b.get("type") == kind:
                v = b.get("id" if kind == "tool_use" else "tool_use_id")
                if isinstance(v, str):
                    out.add(v)
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else float("nan")


def check(path: Path, tokenizer: str) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except TrajectoryError:
        return None
    rows = data if isinstance(data, list) else [data]
    fmt = detect_format(data)
    if fmt not in ("claude-code", "codex"):
        return None
    out: dict[str, Any] = {"file": str(path), "format": fmt, "log_calls": log_calls(rows, fmt)}
    try:
        histories = load_all(path)
    except TrajectoryError as e:
        out["error"] = str(e)
        return out
    tok = get_tokenizer(tokenizer)
    counter = PromptTokens(tok)
    bare: list[float] = []
    shown: list[float] = []
    fitted: list[float] = []
    by_id = log_usage_by_id(rows) if fmt == "claude-code" else {}
    step_prompts: list[int] = []
    usage_wrong = 0
    calls_ids: set[str] = set()
    result_ids: set[str] = set()
    sessions: list[str] = []
    unreplied_errors: list[tuple[float, float]] = []  # (+ prefix, fit) per unreplied call with a recorded size
    calls = 0
    for h in histories:
        unreplied = len(h.meta.get("unreplied") or [])
        calls += len(h.steps) + unreplied
        _, est = request_prefix(h, tok)
        prefix = est.tokens if est is not None else 0
        sessions.append(f"{h.source.rsplit('#', 1)[-1] if '#' in h.source else 'main'}:{len(h.steps)}+{unreplied}u"
                        f"/prefix {prefix}")
        ratio = est.ratio if est is not None else 1.0
        for s in h.steps:
            calls_ids |= {c.get("id") for c in s.reply.get("tool_calls") or []}
            result_ids |= {m.get("tool_call_id") for m in s.observations if m.get("role") == "tool"}
            rec = (s.meta.get("usage") or {}).get("prompt_tokens")
            step_prompts.append(rec if isinstance(rec, int) else -1)
            rid = ((s.reply.get("extra") or {}).get("response") or {}).get("id")
            if fmt == "claude-code" and isinstance(rid, str) and by_id.get(rid) != rec:
                usage_wrong += 1
        lost = [u for u in h.meta.get("unreplied") or [] if isinstance(u.get("prompt_tokens"), int) and u["prompt_tokens"] > 0]
        for p in make_projector("base", Options(tokenizer=tok)).prompts(h, final=has_trailing_calls(h)):
            for u in (u for u in lost if u["step"] == p.t):
                n = counter.count(unreplied_prompt(h, p, u["observations"]))
                rec = u["prompt_tokens"]
                unreplied_errors.append((abs(n + prefix - rec) / rec, abs(ratio * (n + prefix) - rec) / rec))
            if p.t == len(h):
                break
            rec = (h.step(p.t + 1).meta.get("usage") or {}).get("prompt_tokens")
            if not isinstance(rec, int) or rec <= 0:
                continue
            n = counter.count(p.messages)
            bare.append(abs(n - rec) / rec)
            shown.append(abs(n + prefix - rec) / rec)
            fitted.append(abs(ratio * (n + prefix) - rec) / rec)
    if fmt == "codex" and not out["log_calls"]:
        out["log_calls"] = None  # no usage events (a trimmed file, a provider without usage): nothing to check
    elif fmt == "codex":  # every stored reply's usage is the next unclaimed usage event, in order
        events = iter(log_codex_prompts(rows))
        usage_wrong = sum(1 for rec in step_prompts if rec not in events)
    else:
        calls_ids.discard(None)
        result_ids.discard(None)
        out["tool_calls"] = (len(calls_ids), len(_ids(rows, "tool_use")))
        out["tool_results"] = (len(result_ids), len(_ids(rows, "tool_result")), len(calls_ids - result_ids))
    out.update(refold_calls=calls, sessions=sessions, calls_with_usage=len(bare), usage_wrong=usage_wrong)
    out["errors"] = (bare, shown, fitted)
    out["unreplied_errors"] = unreplied_errors
    if bare:
        out.update(err_bare=(statistics.median(bare), _pct(bare, 0.9)), err_shown=(statistics.median(shown), _pct(shown, 0.9)),
                   err_prefix=(statistics.median(fitted), _pct(fitted, 0.9)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--tokenizer", default="qwen3.6")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        files = [Path(f) for f in collect_paths([a.dir]) if f.endswith(".jsonl")]
    except RefoldError as e:
        print(f"check_real_logs: {e}", file=sys.stderr)
        return 2
    results = [r for f in files if (r := check(f, a.tokenizer)) is not None]
    if a.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "errors"} for r in results], indent=1))
        return 0
    bad = 0
    for r in results:
        name = str(Path(r["file"]).relative_to(a.dir)) if a.dir.is_dir() else r["file"]
        if "error" in r:
            print(f"{name} [{r['format']}] ERROR {r['error']}")
            bad += 1
            continue
        ok = "ok" if r["refold_calls"] == r["log_calls"] and not r["usage_wrong"] else "MISMATCH"
        if r["log_calls"] is None:
            ok = "(no usage events: not checked)"
        bad += ok == "MISMATCH"
        print(f"{name} [{r['format']}] calls refold {r['refold_calls']} / log {r['log_calls']}, "
              f"usage not the log's: {r['usage_wrong']} {ok}")
        if "tool_calls" in r:
            (c, lc), (res, lres, unpaired) = r["tool_calls"], r["tool_results"]
            print(f"    tool calls refold {c} / log {lc}; results refold {res} / log {lres}; calls without a result {unpaired}")
        if "err_bare" in r:
            (m0, p0), (m1, p1), (m2, p2) = r["err_bare"], r["err_shown"], r["err_prefix"]
            print(f"    |base-recorded|/recorded over {r['calls_with_usage']} calls (median, p90): messages only "
                  f"{m0:.1%} {p0:.1%}; + prefix {m1:.1%} {p1:.1%}; fit (ratio x (prefix + messages)) {m2:.1%} {p2:.1%}")
        if r["unreplied_errors"]:
            print(f"    calls without a stored reply, recorded prompt size ({len(r['unreplied_errors'])}): |base-recorded|/recorded "
                  + ", ".join(f"+ prefix {a:.1%}, fit {b:.1%}" for a, b in r["unreplied_errors"]))
        print("    sessions (steps+unreplied/prefix): " + ", ".join(r["sessions"]))
    print(f"{len(results)} files, {bad} with a call-count mismatch or error")
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        if "errors" in r:
            top = Path(r["file"]).relative_to(a.dir).parts[0] if a.dir.is_dir() else "."
            groups.setdefault((top, r["format"]), []).append(r)
    print("pooled per folder and format (calls refold / log; |base-recorded|/recorded median, p90):")
    for (top, fmt), rs in sorted(groups.items()):
        pooled = [[e for r in rs for e in r["errors"][k]] for k in range(3)]
        if not pooled[0]:
            continue
        figs = "; ".join(f"{label} {statistics.median(xs):.1%} {_pct(xs, 0.9):.1%}"
                         for label, xs in zip(("messages only", "+ prefix", "fit"), pooled, strict=True))
        checked = [r for r in rs if r["log_calls"] is not None]
        refold_calls, logged = sum(r["refold_calls"] for r in checked), sum(r["log_calls"] for r in checked)
        print(f"  {top} [{fmt}] {len(rs)} files, calls {refold_calls} / {logged} (files with usage events), "
              f"{len(pooled[0])} with usage: {figs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
