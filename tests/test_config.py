"""One Config: defaults in one place, overrides, saved runs, one-line errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.config import DEFAULT, Config, profile_for
from refold.errors import PolicyError
from refold.history import History
from refold.policy import Policy
from refold.render import Renderer


def test_top_level_policy_fields_and_sections() -> None:
    c = Config.parse(k=4, mask_after=5, spans={"prompt": True}, boundary={"rule": "cost"})
    assert c.policy == Policy(k=4, mask_after=5)
    assert c.spans.prompt and c.boundary.rule == "cost"
    assert Config.parse() == DEFAULT


def test_overrides_as_mini_takes_them() -> None:
    c = DEFAULT.override(["policy.k=5", "spans.prompt=true", "ledger.budget_tokens=8000", "mask_after=null", "cache=openai"])
    assert (c.policy.k, c.spans.prompt, c.ledger.budget_tokens, c.policy.mask_after, c.cache) == (5, True, 8000, None, "openai")
    assert DEFAULT.policy.k == 3  # frozen: the original is untouched
    # one assignment given as a string (it was read letter by letter: "override 'p' must look like ...")
    assert DEFAULT.override("policy.k=4").policy.k == 4
    assert DEFAULT.override(["policy.dedup=false"]).policy.dedup is False  # a switch still takes true/false


@pytest.mark.parametrize(
    ("assignment", "needle"),
    [
        ("policy.k=0", "invalid config field 'policy.k'"),
        ("boundary.rule=sometimes", "'fixed' or 'cost'"),
        ("spans.nope=1", "unknown config field 'spans.nope'; allowed: enabled"),
        ("nosuch.k=1", "unknown config field 'nosuch.k'"),
        ("k", "must look like section.field=value"),
        ("cache=azure", "invalid config field 'cache'"),
        ("boundary.peak_weight=-1", "invalid config field 'boundary.peak_weight'"),
        ("boundary.position=grid", "invalid config field 'boundary.position': Input should be 'seed' or 'window'"),
        ("policy=5", "invalid config field 'policy': a mapping of policy fields, not 5"),  # was a TypeError
        ("tokenizer=gpt2", "invalid config field 'tokenizer': unknown tokenizer 'gpt2'; valid choices: qwen3.6"),
        ("spans.rationale=(", "invalid config field 'spans.rationale': not a regular expression"),  # was re.error at session start
        # true/false where a number goes was read as 1/0 (`mask_after: true` masked after one step)
        ("policy.mask_after=true", "invalid config field 'policy.mask_after': Input should be a number, not true or false"),
        ("k=true", "invalid config field 'policy.k': Input should be a number, not true or false"),
        ("policy.reply_after=false", "invalid config field 'policy.reply_after': Input should be a number"),
        ("boundary.peak_weight=true", "invalid config field 'boundary.peak_weight': Input should be a number"),
    ],
)
def test_bad_values_are_one_line_naming_the_field(assignment: str, needle: str) -> None:
    with pytest.raises(PolicyError) as e:
        DEFAULT.override([assignment])
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_parse_names_a_policy_that_is_no_mapping_and_keeps_known_tokenizer_names() -> None:
    with pytest.raises(PolicyError, match="invalid config field 'policy': a mapping of policy fields, not 5"):
        Config.parse(policy=5)
    assert Config.parse(policy=Policy(k=4), mask_after=3).policy == Policy(k=4, mask_after=3)
    assert [Config.parse(tokenizer=t).tokenizer for t in ("o200k_base", "chars4", "off")] == ["o200k_base", "chars4", "off"]


def test_the_peak_weight_defaults_to_the_profiles_price() -> None:
    assert DEFAULT.boundary.peak_weight is None  # the profile's: vllm/sglang price peak KV, hosted APIs do not
    c = DEFAULT.override(["boundary.peak_weight=0"])
    assert c.boundary.peak_weight == 0.0 and Config.from_saved(c.saved()) == c


def test_saved_round_trip_and_old_saved_format() -> None:
    c = Config.parse(k=2, prompt={"format_in_system": False}, ledger={"budget_tokens": 1000})
    assert Config.from_saved(c.saved()) == c
    old = {"policy": {"k": 4}, "spans": {"prompt": True}, "format_in_system": False, "format": "refold-mini-1"}
    got = Config.from_saved(old)
    assert got.policy.k == 4 and got.spans.prompt and not got.prompt.format_in_system
    with pytest.raises(PolicyError, match="saved refold config"):
        Config.from_saved({"policy": {"k": "many"}})
    # a whole trajectory gave the defaults (and the protocol from call 1), without a word
    with pytest.raises(PolicyError, match=r"a whole trajectory; pass its info\['config'\]\['refold'\]"):
        Config.from_saved({"trajectory_format": "mini-swe-agent-1.1", "messages": [], "info": {}})
    with pytest.raises(PolicyError, match="must be a mapping"):
        Config.from_saved(None)  # type: ignore[arg-type]


@settings(deadline=None)  # a property, not a timing: a loaded machine must not fail it
@given(st.lists(st.text(max_size=30), min_size=1, max_size=6), st.lists(st.text(max_size=30), min_size=1, max_size=6))
def test_one_renderer_never_serves_one_history_for_another(a: list[str], b: list[str]) -> None:
    """The cache is keyed by content: a fresh history (even at a reused address) gets its own prompt."""
    r = Renderer()

    def build(outputs: list[str]) -> History:
        h = History([{"role": "system", "content": "s"}, {"role": "user", "content": "task"}])
        for i, text in enumerate(outputs):
            h.append({"role": "assistant", "content": f"step {i}\n```bash\necho {i}\n```"}, [{"role": "user", "content": text}])
        return h

    first = r.render(build(a)).messages
    second = r.render(build(b)).messages
    assert second == Renderer().render(build(b)).messages
    assert first == Renderer().render(build(a)).messages


@pytest.mark.parametrize(
    ("url", "profile"),
    [
        ("https://api.openai.com/v1", "openai"),
        ("https://api.anthropic.com/v1", "anthropic"),
        ("https://openrouter.ai/api/v1", "gemini"),
        ("https://api.deepseek.com", "deepseek"),
        ("http://127.0.0.1:8000/v1", "vllm"),
        ("http://user:pw@gpu-box:8000/v1", "vllm"),
    ],
)
def test_the_proxy_picks_the_cache_profile_from_its_upstream(url: str, profile: str) -> None:
    assert profile_for(url) == profile


def test_serve_flags_give_the_library_defaults_unless_a_flag_says_otherwise() -> None:
    from refold.cli.serve import from_flags

    assert from_flags(upstream="http://127.0.0.1:8000/v1") == DEFAULT
    assert from_flags(upstream="https://api.anthropic.com/v1").cache == "anthropic"
    assert from_flags(upstream="https://api.anthropic.com/v1", cache="vllm").cache == "vllm"
    c = from_flags(k=4, dedup=False, mask_after=0, spans=False, span_prompt=True, budget_tokens=8000, boundary="fixed", tokenizer="off")
    assert (c.policy.k, c.policy.dedup, c.policy.mask_after) == (4, False, None)
    assert not c.spans.enabled and not c.spans.prompt  # --no-spans drops its prompt section too
    assert c.ledger.budget_tokens == 8000 and c.boundary.rule == "fixed" and c.tokenizer == "off"
    for flags, needle in [({"k": 0}, "--k:"), ({"budget_tokens": 0}, "--budget-tokens:"), ({"boundary": "sometimes"}, "--boundary:"), ({"cache": "nope"}, "--cache:")]:
        with pytest.raises(PolicyError) as e:
            from_flags(**flags)
        assert str(e.value).startswith(needle) and "\n" not in str(e.value)


def test_the_proxy_holds_one_config_with_its_tokenizer() -> None:
    from refold.proxy.config import ProxyConfig

    up = "http://127.0.0.1:9/v1"
    assert ProxyConfig(upstream=up).tokenizer == DEFAULT.tokenizer
    cfg = ProxyConfig(upstream=up, config=Config.parse(tokenizer="o200k"))
    assert cfg.tokenizer == cfg.config.tokenizer == "o200k"
    cfg = ProxyConfig(upstream=up, config=Config.parse(k=4), tokenizer="off")
    assert cfg.tokenizer == cfg.config.tokenizer == "off" and cfg.config.policy.k == 4
