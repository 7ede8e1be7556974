"""Calls made after the last stored reply (a mini 2.x run ending in a format error, a Claude Code or
Codex compaction's summarization call) are replayed: their prompt is cut from the prompt after
the last step, what the next call would have been sent, and they count in tokens, cost and KV."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_code_log import session
from codex_rollouts import Lines, structured
from refold.chat_tokens import MINI_BASH_TOOL, count_messages
from refold.history import History
from refold.lab.cache import DEFAULT_PRICES
from refold.lab.replay import POLICIES, Settings, iter_prompts
from refold.lab.replay.metrics import measure
from refold.lab.replay.policies import make_projector
from refold.lab.replay.recorded_calls import unreplied_output_estimate
from refold.lab.replay.report import write_csv
from refold.lab.replay.runner import TaskResult, replay_history
from refold.lab.serversim import build_trace
from refold.loaders import load, load_all
from refold.messages import clean
from refold.tokens import get_tokenizer

from conftest import DATA

MINI2 = DATA / "bill" / "mini2_formaterror.traj.json"


def _replay(history: History, policies: tuple[str, ...] = ("base",), **kw: Any) -> dict[str, Any]:
    s = Settings(policies=policies, validate=False, **kw)
    r = TaskResult(file=history.source)
    replay_history(history, s, r)
    assert r.calls == sum(m["calls"] for m in r.policies.values()) / len(policies)
    return r.policies


def _full_context(history: History) -> list[dict[str, Any]]:
    """Every message of the history as the client holds it: the prompt of a call after the last step."""
    out = [clean(m) for m in history.prefix]
    for s in history.steps:
        out += [clean(s.reply), *(clean(o) for o in s.observations)]
    return out


# ---- mini 2.x: a run that ends in a format error ---------------------------------------------


def _mini2_ending_in_format_error(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    data = json.loads(MINI2.read_text())
    msgs = data["messages"][:10]  # through step 3's output (the submission is not made)
    msgs[-1] = {"role": "tool", "tool_call_id": msgs[-2]["tool_calls"][0]["id"], "content": "<returncode>0</returncode>\n<output>\nok\n</output>"}
    error = {"role": "user", "content": "No tool calls found in the response.", "extra": {"interrupt_type": "FormatError"}}
    data["messages"] = [*msgs, error]
    data["info"]["model_stats"]["api_calls"] = 6
    path = tmp_path / "ends_in_error.traj.json"
    path.write_text(json.dumps(data))
    raw = [{k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "tool_call_id")} for m in msgs]
    return path, raw


def test_a_format_error_after_the_last_reply_is_replayed(tmp_path: Path) -> None:
    path, raw = _mini2_ending_in_format_error(tmp_path)
    h = load(path)
    assert len(h) == 3 and h.meta["unreplied"][-1] == {"step": 3, "observations": 1, "type": "FormatError"}
    m = _replay(h, tokenizer="o200k", cache="none", price="gpt-5-mini")["base"]
    pc = m["per_call"]
    assert m["calls"] == 6 and m["unreplied_calls"] == 3 and "unreplayed_calls" not in m
    assert pc["step"] == [1, 0, 0, 2, 3, 0]  # in the order the calls were made
    tok = get_tokenizer("o200k")
    # its prompt: every message before the interrupt (the whole history)
    assert pc["prompt_tokens"][-1] == count_messages(raw, tok, tools=[MINI_BASH_TOOL])
    est = unreplied_output_estimate(h)
    assert pc["output_tokens"][-1] == est and m["unreplied_output_tokens"] == 3 * est
    assert m["prompt_tokens"] == sum(pc["prompt_tokens"]) and m["output_tokens"] == sum(pc["output_tokens"])
    price = DEFAULT_PRICES["gpt-5-mini"]
    expect = sum(
        (n * price.input_per_mtok + o * price.output_per_mtok) / 1e6
        for n, o in zip(pc["prompt_tokens"], pc["output_tokens"], strict=True)
    )
    assert m["cost_usd"] == pytest.approx(expect, rel=1e-6)
    assert m["peak_kv_tokens"] >= pc["prompt_tokens"][-1] + est - 1


def test_every_policy_replays_the_trailing_call(tmp_path: Path) -> None:
    path, _ = _mini2_ending_in_format_error(tmp_path)
    h = load(path)
    got = _replay(h, tuple(POLICIES), tokenizer="o200k", cache="vllm", budget=1024)
    for name, m in got.items():
        assert m["calls"] == 6 and m["per_call"]["step"][-1] == 0, name
        assert m["hidden_needed_calls"] <= 3, name  # the unreplied calls have no reply to judge
    # the other prompts are the ones a replay without the trailing call makes
    h.meta["unreplied"] = h.meta["unreplied"][:-1]
    before = _replay(h, tuple(POLICIES), tokenizer="o200k", cache="vllm", budget=1024)
    for name, m in got.items():
        assert m["per_call"]["prompt_tokens"][:-1] == before[name]["per_call"]["prompt_tokens"], name


def test_simulate_sends_the_trailing_call(tmp_path: Path) -> None:
    path, raw = _mini2_ending_in_format_error(tmp_path)
    h = load(path)
    tr = build_trace(h, "base", tokenizer="o200k", block_size=16)
    assert len(tr.turns) == 6
    assert tr.turns[-1].prompt_len == count_messages(raw, get_tokenizer("o200k"), tools=[MINI_BASH_TOOL])
    assert tr.turns[-1].out_len == unreplied_output_estimate(h)


# ---- Claude Code: the compaction's summarization call ------------------------------------------


def test_a_claude_code_compaction_is_replayed_with_the_whole_context(tmp_path: Path) -> None:
    path = session(tmp_path / "s.jsonl")
    main = load_all(path)[0]
    (entry,) = main.meta["unreplied"]
    tok = get_tokenizer("chars4")
    m = _replay(main, tokenizer="chars4", cache="none", prefix_estimate=False)["base"]
    pc = m["per_call"]
    assert m["calls"] == len(main) + 1 and pc["step"] == [*range(1, len(main) + 1), 0]
    final = list(iter_prompts(main, "base", tokenizer="chars4", final=True))[-1]
    assert final.t == len(main) and final.messages == _full_context(main)  # the pre-compaction context
    assert pc["prompt_tokens"][-1] == count_messages(_full_context(main), tok)
    assert pc["prompt_tokens"][-1] > max(pc["prompt_tokens"][:-1])
    # its output is the summary the next session starts with, as recorded
    assert pc["output_tokens"][-1] == tok.count(entry["summary"]) == m["unreplied_output_tokens"]
    assert m["prompt_tokens"] == sum(pc["prompt_tokens"]) and m["output_tokens"] == sum(pc["output_tokens"])


# ---- Codex: the compaction's summarization call ------------------------------------------------


def _codex_compacted() -> Lines:
    r = Lines().meta().turn().user("Fix the bug.").shell("a", ["bash", "-lc", "cat a.py"]).usage(100, 0, 5, 0).output("a", structured("x = 1\n" * 50))
    r.shell("b", ["bash", "-lc", "cat b.py"]).usage(200, 100, 6, 0).output("b", structured("y = 2\n" * 50))
    r.usage(900, 100, 300, 0)  # the summarization call: its usage, no items
    r.add("compacted", {"message": "Summary: a.py sets x, b.py sets y."}).turn()
    r.say("done").usage(320, 0, 5, 0)
    return r


def test_a_codex_compaction_is_replayed_with_its_recorded_summary_size(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    path.write_text(_codex_compacted().text(), encoding="utf-8")
    first, _second = load_all(path)
    assert first.meta["unreplied"] == [{"step": 2, "observations": 1, "type": "compaction", "prompt_tokens": 900, "output_tokens": 300}]
    tok = get_tokenizer("chars4")
    m = _replay(first, tokenizer="chars4", cache="none", prefix_estimate=False)["base"]
    pc = m["per_call"]
    assert m["calls"] == 3 and pc["step"] == [1, 2, 0]
    assert pc["prompt_tokens"][-1] == count_messages(_full_context(first), tok)
    assert pc["output_tokens"][-1] == 300 == m["unreplied_output_tokens"]
    tr = build_trace(first, "base", tokenizer="chars4", prefix_estimate=False)
    assert [t.prompt_len for t in tr.turns] == pc["prompt_tokens"] and tr.turns[-1].out_len == 300


# ---- invariant: every call is replayed, wherever the unreplied ones were made -------------------


def _history(n_steps: int, n_obs: list[int]) -> History:
    h = History([{"role": "system", "content": "sys"}, {"role": "user", "content": "task " * 20}], source="gen")
    for i in range(n_steps):
        reply = {"role": "assistant", "content": f"step {i}\n```bash\necho {i}\n```"}
        h.append(reply, [{"role": "user", "content": f"out {i}.{j} " * 10} for j in range(n_obs[i])])
    return h


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_base_replays_stored_plus_unreplied_calls(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 5))
    n_obs = data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    h = _history(n, n_obs)
    where = st.integers(0, n).flatmap(lambda t: st.tuples(st.just(t), st.integers(0 if t else 1, n_obs[t - 1] if t else 2)))
    placed = data.draw(st.lists(where, max_size=6))
    h.meta["unreplied"] = [{"step": t, "observations": j, "type": "FormatError"} for t, j in sorted(placed)]
    tok = get_tokenizer("chars4")
    m = measure(h, make_projector("base", Settings(policies=("base",), tokenizer="chars4").options()), tok, cache_name="none")
    assert m.calls == n + len(placed) and m.unreplied_calls == len(placed)
    assert m.per_call["step"].count(0) == len(placed)
    trailing = [j for t, j in placed if t == n]
    if trailing:  # the last call's prompt: the whole history, without the messages not yet seen
        full = _full_context(h)
        assert m.per_call["prompt_tokens"][-1] == count_messages(full[: len(full) - n_obs[-1] + max(trailing)], tok)


def test_the_viewer_bills_the_trailing_call_in_its_totals(tmp_path: Path) -> None:
    from refold.lab.replay import Options
    from refold.lab.viewer.data import build_data
    from refold.lab.viewer.variants import build_variants

    path, _ = _mini2_ending_in_format_error(tmp_path)
    h = load(path)
    tok = get_tokenizer("chars4")
    d = build_data(h, build_variants(["refold", "masking"], Options(tokenizer=tok), mechanisms=False), tok)
    for v in d["variants"]:
        if "same_as" in v:
            continue
        assert len(v["tokens"]) == len(v["cost"]) == 3  # one column per stored call
        assert v["totals"]["unreplied_calls"] == 3
        assert v["totals"]["prompt_tokens"] > sum(v["tokens"])


def test_the_csv_names_the_unreplied_calls_prompt_tokens(tmp_path: Path) -> None:
    path, _ = _mini2_ending_in_format_error(tmp_path)
    h = load(path)
    s = Settings(policies=("base",), validate=False, tokenizer="o200k", cache="none")
    r = TaskResult(file=h.source)
    replay_history(h, s, r)
    out = tmp_path / "r.csv"
    write_csv([r], out)
    (row,) = list(csv.DictReader(out.open()))
    m = r.policies["base"]
    assert int(row["unreplied_prompt_tokens"]) == m["unreplied_prompt_tokens"] > 0
    assert m["unreplied_prompt_tokens"] == sum(
        n for n, step in zip(m["per_call"]["prompt_tokens"], m["per_call"]["step"], strict=True) if step == 0
    )
