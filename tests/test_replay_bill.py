"""A replay that matches the provider's bill: one history per agent, every call (unreplied ones
too), tool schemas and framing, reasoning tokens, price rows.

Fixtures in tests/data/bill/ (written for these tests, same formats as real runs; kept out of
tests/data itself, whose every file the loader and golden-prompt tests walk):
* ``coder_multiagent.traj``: a CodeR-style SWE-agent .traj with two agents; its
  ``tokens_sent`` was computed with the OpenAI cookbook formula per agent (bpe_openai directly).
* ``coder_reproducer.traj``: a CodeR-style file whose Reproducer runs 8 calls under CodeR's
  ``LastNObservations(n=5)``, with one requery after a format error the file does not hold;
  ``tokens_sent`` counts every call as sent (cookbook formula, bpe_openai directly).
* ``mini2_formaterror.traj.json``: a mini-swe-agent 2.x tool-call run with two format errors,
  reasoning and cached tokens; each stored call's ``prompt_tokens`` follows the rule measured on
  gpt-5-mini (cookbook + tool block + tool-call framing), computed independently of refold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.chat_tokens import MINI_BASH_TOOL, count_messages, prompt_token_ids, tools_token_ids
from refold.context import TOOL_SCHEMAS
from refold.errors import TrajectoryError
from refold.formats.mini import unreplied_calls
from refold.history import History
from refold.lab.cache import DEFAULT_PRICES, price_for_model
from refold.lab.replay import Settings, build_report, replay_paths
from refold.lab.replay.runner import TaskResult, replay_history
from refold.lab.replay.settings import request_tools
from refold.loaders import load, load_all, split_source
from refold.tokens import get_tokenizer

from conftest import DATA, run_cli

CODER = DATA / "bill" / "coder_multiagent.traj"
MINI2 = DATA / "bill" / "mini2_formaterror.traj.json"
REPRO = DATA / "bill" / "coder_reproducer.traj"


def _base(history: History, **kw: Any) -> dict[str, Any]:
    s = Settings(policies=kw.pop("policies", ("base",)), validate=False, **kw)
    r = TaskResult(file=history.source)
    replay_history(history, s, r)
    return r.policies


# ---- one history per agent -----------------------------------------------------------------


def test_multi_agent_file_loads_one_history_per_agent() -> None:
    sessions = load_all(CODER)
    assert [h.source for h in sessions] == [f"{CODER}#Manager", f"{CODER}#Programmer"]
    manager, programmer = sessions
    assert len(manager) == 2 and len(programmer) == 3
    assert [m["role"] for m in programmer.prefix] == ["system", "user", "user"]  # demo stays prefix
    assert programmer.prefix[1].get("is_demo")
    assert all("Manager" not in str(m.get("content")) for m in programmer.messages())
    # the Manager's second turn continues its own conversation, not the Programmer's
    assert "Programmer's conclusions" in manager.step(1).observations[0]["content"]
    assert manager.meta["agent"] == "Manager" and manager.meta["file_stats"]["api_calls"] == 5
    assert manager.meta["api_calls"] is None  # the file's count is not this agent's


def test_load_of_multi_agent_file_names_agents() -> None:
    with pytest.raises(TrajectoryError, match=r"holds 2 agents \(Manager, Programmer\)"):
        load(CODER)
    assert len(load(f"{CODER}#Programmer")) == 3
    with pytest.raises(TrajectoryError, match="no agent 'Tester'"):
        load(f"{CODER}#Tester")
    with pytest.raises(TrajectoryError, match="single-agent"):
        load(f"{MINI2}#Programmer")
    assert split_source(str(MINI2)) == (str(MINI2), None)



def test_an_agent_named_in_another_case_is_found_when_only_one_matches(tmp_path: Path) -> None:
    """``run.traj#programmer`` was "no agent 'programmer' (agents: Manager, Programmer)"."""
    h = load(f"{CODER}#programmer")
    assert h.source == f"{CODER}#Programmer" and h.meta["agent"] == "Programmer"
    assert h.digest == load(f"{CODER}#Programmer").digest
    # two agents whose names differ only in case: the one-line error listing them, as before
    data = json.loads(CODER.read_text())
    for m in data["history"]:
        if isinstance(m, dict) and m.get("agent") == "Manager":
            m["agent"] = "programmer"
    twins = tmp_path / "twins.traj"
    twins.write_text(json.dumps(data))
    assert load(f"{twins}#programmer").meta["agent"] == "programmer"  # an exact name wins
    with pytest.raises(TrajectoryError, match=r"no agent 'PROGRAMMER' \(agents: programmer, Programmer\)$"):
        load(f"{twins}#PROGRAMMER")

@pytest.mark.parametrize("command", ["view", "sessions show"])
def test_cli_error_names_the_agent_form_first(command: str, tmp_path: Path) -> None:
    """A CLI user is told to name an agent (FILE#Agent) and which commands take them all, not only a Python call."""
    out = ["-o", str(tmp_path / "r.html")] if command == "view" else []
    r = run_cli(*command.split(), str(CODER), *out)
    assert r.returncode != 0
    assert f"'{CODER}#Manager'" in r.stderr and "refold replay" in r.stderr
    assert "Traceback" not in r.stderr


def test_single_agent_files_unchanged() -> None:
    (h,) = load_all(MINI2)
    assert h.source == str(MINI2) and "agent" not in h.meta
    swe = DATA / "sweagent__pydicom__pydicom-1458.traj.gz"  # every entry says agent 'main'
    assert [x.source for x in load_all(swe)] == [str(swe)]


def test_per_agent_replay_reproduces_tokens_sent() -> None:
    sent = json.loads(CODER.read_text())["info"]["model_stats"]["tokens_sent"]
    total = sum(_base(h, tokenizer="cl100k", cache="none")["base"]["prompt_tokens"] for h in load_all(CODER))
    assert total == sent
    merged = History.from_messages(json.loads(CODER.read_text())["history"])
    tok = get_tokenizer("cl100k")
    merged_total = sum(count_messages(merged.messages()[: i], tok) for i, m in enumerate(merged.messages()) if m["role"] == "assistant" and not m.get("is_demo"))
    assert merged_total > sent  # what replaying the merged file used to count


def _cookbook(msgs: list[dict[str, Any]]) -> int:
    import bpe_openai

    enc = bpe_openai.get_encoding("cl100k_base")
    return 3 + sum(3 + len(enc.encode_ordinary(m["role"])) + len(enc.encode_ordinary(m["content"])) for m in msgs)


def _last_n(msgs: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
    keep = {users[0], *users[-n:]}
    return [
        m if m["role"] != "user" or i in keep else {**m, "content": f"Old output omitted ({len(m['content'].splitlines())} lines)"}
        for i, m in enumerate(msgs)
    ]


def test_base_replays_the_clients_own_cut() -> None:
    raw = json.loads(REPRO.read_text())["history"]
    mine = [{"role": m["role"], "content": m["content"]} for m in raw if m["agent"] == "Reproducer"]
    calls = [i for i, m in enumerate(mine) if m["role"] == "assistant"]
    expected = sum(_cookbook(_last_n(mine[:i], 5)) for i in calls)
    full = sum(_cookbook(mine[:i]) for i in calls)
    repro = load(f"{REPRO}#Reproducer")
    got = _base(repro, tokenizer="cl100k", cache="none")["base"]
    assert got["prompt_tokens"] == expected < full  # the first 2 outputs are cut in the last calls
    assert got["removed_tokens_lost"] > 0  # what the client cut is gone for good
    manager = load(f"{REPRO}#Manager")  # other roles send their whole history
    m = [{"role": x["role"], "content": x["content"]} for x in raw if x["agent"] == "Manager"]
    assert _base(manager, tokenizer="cl100k", cache="none")["base"]["prompt_tokens"] == _cookbook(m[:2]) + _cookbook(m[:4])


def test_requeries_the_file_counts_are_estimated_per_file() -> None:
    stats = json.loads(REPRO.read_text())["info"]["model_stats"]
    s = Settings(policies=("base", "refold"), tokenizer="cl100k", cache="none", price="gpt-4-turbo", validate=False)
    results = replay_paths([str(REPRO)], s)
    assert sum(r.calls for r in results) == stats["api_calls"] - 1
    stored = sum(r.policies["base"]["prompt_tokens"] for r in results)
    assert stored < stats["tokens_sent"]
    report = build_report(results, s)
    f = report["files"][str(REPRO)]
    est = f["estimated"]
    assert est["calls"] == 1 and f["calls"] == stats["api_calls"]
    out = sum(r.policies["base"]["output_tokens"] for r in results)
    assert est["output_tokens_per_call"] == stats["tokens_received"] - out
    total = f["policies"]["base"]["prompt_tokens"]
    assert total == stored + est["policies"]["base"]["prompt_tokens"]
    assert abs(total / stats["tokens_sent"] - 1) < abs(stored / stats["tokens_sent"] - 1)
    assert abs(total / stats["tokens_sent"] - 1) < 0.03
    assert f["policies"]["refold"]["prompt_tokens"] > sum(r.policies["refold"]["prompt_tokens"] for r in results)
    assert report["tasks"][0]["unrecorded_calls_estimated"]["calls"] == 1
    # a file whose counts agree gets no estimate
    assert "estimated" not in build_report(replay_paths([str(CODER)], s), s)["files"][str(CODER)]


def test_replay_paths_reports_per_agent_and_per_file() -> None:
    s = Settings(policies=("base", "refold"), tokenizer="chars4", cache="vllm")
    results = replay_paths([str(CODER)], s)
    assert [r.agent for r in results] == ["Manager", "Programmer"]
    assert all(r.path == str(CODER) and r.sessions == 2 for r in results)
    report = build_report(results, s)
    f = report["files"][str(CODER)]
    assert f["sessions"] == ["Manager", "Programmer"]
    assert f["calls"] == 5 == f["recorded"]["api_calls"]
    assert f["policies"]["base"]["prompt_tokens"] == sum(r.policies["base"]["prompt_tokens"] for r in results)
    assert report["tasks"][0]["file"].endswith("#Manager") and report["tasks"][0]["agent"] == "Manager"
    one = replay_paths([f"{CODER}#Programmer"], s)
    assert len(one) == 1 and one[0].error is None and one[0].calls == 3


def test_cli_replays_agents(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = run_cli("replay", str(CODER), "--tokenizer", "chars4", "--json", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "2 sessions" in p.stdout
    assert len(json.loads(out.read_text())["tasks"]) == 2
    p = run_cli("replay", f"{CODER}#Nobody", "--tokenizer", "chars4", cwd=tmp_path)
    assert p.returncode == 1 and "no agent 'Nobody'" in p.stderr and "Traceback" not in p.stderr
    assert "policy" not in p.stdout and "1 file (1 failed)" in p.stdout  # no empty table when nothing replayed
    p = run_cli("view", str(CODER), cwd=tmp_path)
    assert p.returncode != 0 and "#Manager" in p.stderr and "Traceback" not in p.stderr


# ---- every call, the request as the provider counts it ----------------------------------------


def test_unreplied_calls_are_located() -> None:
    h = load(MINI2)
    assert h.meta["unreplied"] == [
        {"step": 1, "observations": 1, "type": "FormatError"},
        {"step": 1, "observations": 2, "type": "FormatError"},
    ]
    assert len(h) == 3 and h.meta["file_stats"]["api_calls"] == 5


def _usage(h: History) -> list[dict[str, Any]]:
    return [s.reply["extra"]["response"]["usage"] for s in h.steps]


def test_every_call_replayed_and_counted_as_billed() -> None:
    h = load(MINI2)
    m = _base(h, tokenizer="o200k", cache="openai", price="auto")["base"]
    assert m["calls"] == 5 and m["unreplied_calls"] == 2
    pc = m["per_call"]
    assert pc["step"] == [1, 0, 0, 2, 3]  # in the order the calls were made
    stored = [n for n, s in zip(pc["prompt_tokens"], pc["step"], strict=True) if s]
    assert stored == [u["prompt_tokens"] for u in _usage(h)]  # exact, tools and framing included
    tok = get_tokenizer("o200k")
    raw = [{k: v for k, v in x.items() if k in ("role", "content", "tool_calls", "tool_call_id")} for x in json.loads(MINI2.read_text())["messages"]]
    # an unreplied call's prompt is every message before its interrupt
    assert pc["prompt_tokens"][1] == count_messages(raw[:4], tok, tools=[MINI_BASH_TOOL])
    assert pc["prompt_tokens"][2] == count_messages(raw[:5], tok, tools=[MINI_BASH_TOOL])
    assert pc["prompt_tokens"][1] < pc["prompt_tokens"][2] < pc["prompt_tokens"][3]


def _mini2_run(path: Path, cached: list[int] | None) -> Path:
    """A mini 2.x tool-call run with outputs long enough to cache; usage filled from ``cached``."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer shell."},
        {"role": "user", "content": "<pr_description>\nparse() fails on empty input.\n</pr_description>\n" + "\n".join(f"rule {j}: keep case {j}" for j in range(300))},
    ]
    for i in range(5):
        call = {"function": {"arguments": json.dumps({"command": f"cat part{i}.py"}), "name": "bash"}, "id": f"c{i}", "type": "function"}
        usage = {"prompt_tokens": 0, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 0}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call],
                     "extra": {"actions": [{"command": f"cat part{i}.py", "tool_call_id": f"c{i}"}], "response": {"usage": usage}}})
        body = "\n".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}" for j in range(400))
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": body})
    data = {"info": {"model_stats": {"api_calls": 5}, "config": {"model": {"model_name": "openai/gpt-5-mini"}}, "mini_version": "2.2.4"}, "messages": msgs, "trajectory_format": "mini-swe-agent-1.1"}
    path.write_text(json.dumps(data))
    if cached is None:
        return path
    counts = [n for n, st in zip(*(lambda pc: (pc["prompt_tokens"], pc["step"]))(_base(load(path), tokenizer="o200k", cache="none")["base"]["per_call"]), strict=True) if st]
    for m, n, c in zip([x for x in msgs if x["role"] == "assistant"], counts, cached, strict=True):
        m["extra"]["response"]["usage"].update(prompt_tokens=n, prompt_tokens_details={"cached_tokens": c})
    path.write_text(json.dumps(data))
    return path


def test_replayed_cache_meets_the_recorded_state(tmp_path: Path) -> None:
    probe = _base(load(_mini2_run(tmp_path / "a.traj.json", None)), tokenizer="o200k", cache="openai-exact")["base"]
    full = probe["per_call"]["cached_tokens"]  # the documented rule's hits: every call warm
    assert all(c >= 1024 for c in full[1:])
    # recorded: call 3 reached a cold machine, call 5 one holding calls 1..3 only
    recorded = [0, full[1], 0, full[3], full[3]]
    run = load(_mini2_run(tmp_path / "b.traj.json", recorded))
    got = _base(run, tokenizer="o200k", cache="openai-replayed", policies=("base", "refold-best", "masking"))
    assert got["base"]["per_call"]["cached_tokens"] == recorded
    plain = _base(run, tokenizer="o200k", cache="openai")["base"]["per_call"]["cached_tokens"]
    assert plain[2] > 0  # the predictive profile cannot know call 3 missed
    # other policies meet the same cold call
    assert got["masking"]["per_call"]["cached_tokens"][2] == 0 == got["refold-best"]["per_call"]["cached_tokens"][2]


def test_reasoning_tokens_in_output_kv_and_cost() -> None:
    h = load(MINI2)
    m = _base(h, tokenizer="o200k", cache="none", price="gpt-5-mini")["base"]
    reasoning = sum(u["completion_tokens_details"]["reasoning_tokens"] for u in _usage(h))
    assert m["reasoning_tokens"] == reasoning == 232
    stored_out = [o for o, s in zip(m["per_call"]["output_tokens"], m["per_call"]["step"], strict=True) if s]
    assert stored_out[1] >= 200  # the call that reasoned 200 tokens
    est = m["unreplied_output_tokens"]
    assert est == 2 * round(sum(u["completion_tokens"] for u in _usage(h)) / 3)  # ESTIMATED from the run
    assert m["output_tokens"] == sum(m["per_call"]["output_tokens"])
    price = DEFAULT_PRICES["gpt-5-mini"]
    expect = sum(
        (n * price.input_per_mtok + o * price.output_per_mtok) / 1e6
        for n, o in zip(m["per_call"]["prompt_tokens"], m["per_call"]["output_tokens"], strict=True)
    )
    assert m["cost_usd"] == pytest.approx(expect, rel=1e-6)
    assert m["peak_kv_tokens"] >= m["per_call"]["prompt_tokens"][3] + 200  # the reasoning is held in KV


def test_context_tools_counted_for_refold_policies() -> None:
    h = load(MINI2)
    assert request_tools(h, "base") == [MINI_BASH_TOOL]
    assert request_tools(h, "refold") == [MINI_BASH_TOOL, *TOOL_SCHEMAS]
    assert request_tools(load(DATA / "mswea-gemini3pro__django__django-16255.traj.json"), "refold") is None
    tok = get_tokenizer("o200k")
    extra = len(tools_token_ids([MINI_BASH_TOOL, *TOOL_SCHEMAS], tok)) - len(tools_token_ids([MINI_BASH_TOOL], tok))
    assert extra > 250
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert count_messages(msgs, tok, tools=[MINI_BASH_TOOL, *TOOL_SCHEMAS]) - count_messages(msgs, tok, tools=[MINI_BASH_TOOL]) == extra


def test_qwen_tools_go_in_the_system_turn() -> None:
    q = get_tokenizer("qwen3.6")
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "u"}]
    with_tools = prompt_token_ids(msgs, q, tools=[MINI_BASH_TOOL])
    plain = prompt_token_ids(msgs, q)
    user_turn = prompt_token_ids(msgs[1:], q)
    assert with_tools[-len(user_turn) :] == user_turn  # the rest of the prompt is unchanged
    assert with_tools[:3] == plain[:3]  # <|im_start|>system\nsys ...
    assert len(with_tools) - len(plain) > 100
    # no system message: the tools get a system turn of their own
    assert len(prompt_token_ids(msgs[1:], q, tools=[MINI_BASH_TOOL])) > len(user_turn)


def test_o200k_arguments_counted_as_compact_json() -> None:
    tok = get_tokenizer("o200k")

    def call(args: str) -> dict[str, Any]:
        return {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "bash", "arguments": args}}]}

    assert count_messages([call('{"command": "ls",  "timeout": 5}')], tok) == count_messages(
        [call('{"command":"ls","timeout":5}')], tok
    )
    cl = get_tokenizer("cl100k")  # cookbook counting, arguments as sent
    assert count_messages([call('{"command": "ls",  "timeout": 5}')], cl) > count_messages(
        [call('{"command":"ls","timeout":5}')], cl
    )


# ---- prices ----------------------------------------------------------------------------------------


def test_price_rows_for_recorded_models_and_file_override(tmp_path: Path) -> None:
    assert price_for_model("google/gemini-3-pro-preview") == "gemini-3-pro"
    assert price_for_model("openai/gpt-5-mini") == "gpt-5-mini"
    assert price_for_model("gpt-4-1106-preview") == "gpt-4-turbo"
    assert price_for_model("some/unknown") is None
    h = load(MINI2)
    base = _base(h, tokenizer="o200k", cache="none", price="auto")["base"]["cost_usd"]
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"gpt-5-mini": {"input_per_mtok": 0.5, "cached_input_per_mtok": 0.05, "output_per_mtok": 4.0}}))
    doubled = _base(h, tokenizer="o200k", cache="none", price="auto", prices_file=str(table))["base"]["cost_usd"]
    assert doubled == pytest.approx(2 * base, rel=1e-6)


# ---- invariant: an unreplied call's prompt is rebuilt from the History ---------------------------

_ROLE = st.sampled_from(["tool", "user", "interrupt", "assistant"])


@settings(max_examples=80, deadline=None)
@given(st.lists(_ROLE, min_size=1, max_size=30))
def test_unreplied_prompt_is_messages_before_interrupt(roles: list[str]) -> None:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i, r in enumerate(roles):
        if r == "interrupt":
            msgs.append({"role": "user", "content": f"format error {i}", "extra": {"interrupt_type": "FormatError"}})
        else:
            msgs.append({"role": r, "content": f"{r} {i}"})
    h = History.from_messages(msgs)
    for u in unreplied_calls(msgs):
        t, j = u["step"], u["observations"]
        rebuilt = list(h.prefix[:j]) if t == 0 else list(h.prefix)
        for s in h.steps[: t] if t else ():
            rebuilt += [s.reply, *s.observations]
        if t:
            rebuilt = rebuilt[: len(rebuilt) - len(h.step(t).observations) + j]
        nxt = msgs[len(rebuilt)]
        assert nxt["extra"]["interrupt_type"] == "FormatError"
        assert [m["content"] for m in rebuilt] == [m["content"] for m in msgs[: len(rebuilt)]]
        assert msgs[len(rebuilt) - 1]["role"] != "assistant"


def test_server_trace_has_every_call_with_tools() -> None:
    from refold.lab.serversim import build_trace

    h = load(MINI2)
    tr = build_trace(h, "base", tokenizer="o200k", block_size=16)
    assert len(tr.turns) == 5  # 3 stored + 2 unreplied calls
    stored = [tr.turns[i].prompt_len for i in (0, 3, 4)]
    assert stored == [u["prompt_tokens"] for u in _usage(h)]  # tool schema and framing counted
    assert tr.turns[3].out_len == _usage(h)[1]["completion_tokens"]  # reasoning included


def test_agent_errors_stay_one_short_line(tmp_path: Path) -> None:
    data = json.loads(CODER.read_text())
    for i, m in enumerate(data["history"]):
        m["agent"] = f"agent\n{i} " + "x" * 500
    bad = tmp_path / "many.traj"
    bad.write_text(json.dumps(data))
    with pytest.raises(TrajectoryError) as e:
        load(bad)
    assert "\n" not in str(e.value) and len(str(e.value)) < 600 + len(str(bad))
    with pytest.raises(TrajectoryError) as e:
        load(f"{bad}#" + "y" * 1000)
    assert len(str(e.value)) < 600 + len(str(bad))


# ---- recorded times and the timed cache tiers ------------------------------------------------


def test_recorded_times_interpolate_unreplied_calls() -> None:
    from refold.lab.replay.cache_requests import CallIds
    from refold.lab.replay.metrics import measure
    from refold.lab.replay.policies import make_projector
    from refold.lab.replay.projectors import Options
    from refold.lab.replay.recorded_calls import recorded_times

    h = load(MINI2)
    times = recorded_times(h)
    assert times == {1: 1700000002.0, 2: 1700000006.0, 3: 1700000008.0}  # extra.timestamp: no response.created
    tok = get_tokenizer("o200k")
    keep: list[CallIds] = []
    measure(h, make_projector("base", Options(tokenizer=tok)), tok, cache_name="none", keep_ids=keep, tools=request_tools(h, "base"))
    got = [c.time for c in keep]
    assert got == pytest.approx([1700000002.0, 1700000002.0 + 4 / 3, 1700000002.0 + 8 / 3, 1700000006.0, 1700000008.0])


def test_timed_profile_meets_each_call_at_its_recorded_time(tmp_path: Path) -> None:
    path = _mini2_run(tmp_path / "t.traj.json", None)
    data = json.loads(path.read_text())
    created = [1000, 1001, 1010, 1011, 1040]  # seconds: 1 s, 9 s, 1 s, 29 s after the previous call
    for m, t in zip([x for x in data["messages"] if x["role"] == "assistant"], created, strict=True):
        m["extra"]["response"]["created"] = t
    path.write_text(json.dumps(data))
    run = load(path)
    fine = _base(run, tokenizer="o200k", cache="openai-exact")["base"]["per_call"]["cached_tokens"]
    got = _base(run, tokenizer="o200k", cache="openai")["base"]["per_call"]["cached_tokens"]
    keep = 1 - 0.02  # the profile's expected miss rate

    def coarse(n: int) -> int:
        v = 640 + 1024 * ((n - 640) // 1024)
        return v if v >= 1024 else 0

    assert got == [0, round(fine[1] * keep), round(coarse(fine[2]) * keep), round(fine[3] * keep), round(coarse(fine[4]) * keep)]
    assert coarse(fine[2]) < fine[2]  # the tiers differ on these prompts
    # without recorded times every call is fresh: the fine grid throughout
    untimed = _base(load(_mini2_run(tmp_path / "u.traj.json", None)), tokenizer="o200k", cache="openai")["base"]
    assert untimed["per_call"]["cached_tokens"] == [round(f * keep) for f in fine]


def test_count_calibration_prices_estimated_provider_counts() -> None:
    from refold.lab.cache import CountCalibration, count_calibration
    from refold.lab.replay.metrics import measure
    from refold.lab.replay.policies import make_projector
    from refold.lab.replay.projectors import Options

    cal = count_calibration("gemini-3-pro", "qwen3.6")
    assert cal is not None and "ESTIMATED" in cal.label and count_calibration("gpt-5-mini", "o200k") is None
    assert cal.prompt(10_000, 38_000) == round(cal.per_token * 10_000 + cal.per_char * 38_000 + cal.per_call)
    h = load(MINI2)
    tok = get_tokenizer("qwen3.6")
    price = DEFAULT_PRICES["gemini-3-pro"]

    def cost(c: CountCalibration | None) -> tuple[float, str]:
        m = measure(h, make_projector("base", Options(tokenizer=tok)), tok, cache_name="none", price=price, calibration=c, tools=request_tools(h, "base"))
        return m.cost_usd, m.cost_counts

    plain, label = cost(None)
    assert label == ""
    ident = CountCalibration("gemini-3-pro", "qwen3.6", 1.0, 0.0, 0.0, 1.0, "test")
    assert cost(ident)[0] == pytest.approx(plain, rel=1e-9)
    ref = measure(h, make_projector("base", Options(tokenizer=tok)), tok, cache_name="none", price=price, tools=request_tools(h, "base"))
    prompt_part = ref.prompt_tokens * price.input_per_mtok / 1e6
    assert cost(CountCalibration("gemini-3-pro", "qwen3.6", 2.0, 0.0, 0.0, 1.0, "test"))[0] == pytest.approx(plain + prompt_part, rel=1e-6)
    # visible output scales, recorded reasoning does not
    visible = ref.output_tokens - ref.reasoning_tokens - ref.unreplied_output_tokens
    doubled = cost(CountCalibration("gemini-3-pro", "qwen3.6", 1.0, 0.0, 0.0, 2.0, "test"))[0]
    assert doubled == pytest.approx(plain + visible * price.output_per_mtok / 1e6, rel=1e-6)
    # the replay applies the fitted calibration to a Gemini price row, and can be told not to
    on = _base(h, tokenizer="qwen3.6", cache="none", price="gemini-3-pro")["base"]
    off = _base(h, tokenizer="qwen3.6", cache="none", price="gemini-3-pro", count_calibration=False)["base"]
    assert on["cost_counts"] == cal.label and off["cost_counts"] == ""
    assert on["prompt_tokens"] == off["prompt_tokens"] and on["cost_usd"] != off["cost_usd"]


def test_report_says_when_cost_is_on_estimated_counts() -> None:
    s = Settings(policies=("base",), cache="none", price="gemini-3-pro", validate=False)
    assert "Cost on ESTIMATED gemini-3-pro counts (calibrated from qwen3.6)." in build_report(replay_paths([str(MINI2)], s), s)["simulated"]
    s = Settings(policies=("base",), cache="none", price="gpt-5-mini", validate=False)
    assert "ESTIMATED" not in build_report(replay_paths([str(MINI2)], s), s)["simulated"]


def test_count_calibration_fit_recovers_a_known_counting_rule(tmp_path: Path) -> None:
    import sys

    from refold.lab.replay.cache_requests import message_chars
    from refold.lab.replay.policies import make_projector
    from refold.lab.replay.projectors import Options

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench_bill import _count_rows, fit_counts

    tok = get_tokenizer("qwen3.6")
    histories = []
    for r in range(4):
        path = _mini2_run(tmp_path / f"r{r}.traj.json", None)
        data = json.loads(path.read_text())
        # vary the content mix per run so tokens and characters are not collinear
        for m in data["messages"]:
            if m["role"] == "tool":
                m["content"] = m["content"][: 2000 + 1500 * r] + ("\n" + "x" * (40 * r + 1)) * (20 + 10 * r)
        path.write_text(json.dumps(data))
        rows = _count_rows(load(path), "qwen3.6")
        assert rows == []  # no usage recorded yet: nothing to fit
        h = load(path)
        asst = [x for x in data["messages"] if x["role"] == "assistant"]
        for p, m in zip(make_projector("base", Options(tokenizer=tok)).prompts(h), asst, strict=True):
            n = len(prompt_token_ids(p.messages, tok, tools=request_tools(h, "base")))
            m["extra"]["response"]["usage"] = {"prompt_tokens": round(0.8 * n + 0.05 * message_chars(p.messages) - 100), "completion_tokens": 30}
        path.write_text(json.dumps(data))
        histories.append((path.name, load(path)))
    fitted = fit_counts(histories, "qwen3.6")
    f = fitted["fitted"]
    assert f["per_token"] == pytest.approx(0.8, abs=0.01)
    assert f["per_char"] == pytest.approx(0.05, abs=0.002)
    assert f["per_call"] == pytest.approx(-100, abs=15)
    assert fitted["halves"]["test"]["mean_abs_calibrated"] < 0.001 < fitted["halves"]["test"]["mean_abs_uncalibrated"]


def test_sessions_show_takes_one_agent_of_a_multi_agent_file(capsys: pytest.CaptureFixture[str]) -> None:
    from refold.cli import main

    assert main(["sessions", "show", f"{CODER}#Programmer", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert len(shown["steps"]) == 3
    assert main(["sessions", "show", str(CODER)]) == 2  # the whole file: which agent?
    assert f"'{CODER}#Manager'" in capsys.readouterr().err
