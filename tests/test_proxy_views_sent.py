"""A proxy's session page shows what the agent was sent: the ``sent`` variant renders with the
proxy's own Config (its flags, its cache profile), and equals the prompts the upstream received."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from refold import Config
from refold.history import History
from refold.lab.viewer.variants import SENT, sent_variant
from refold.proxy import ProxyConfig

from fake_upstream import AUTH, BASH_TOOLS, FakeUpstream, asgi_proxy


def _code(i: int) -> str:
    return "\n".join(f"def helper_{i}_{j}(x):\n    return x * {j} + {i}" for j in range(40))


def _texts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for m in messages:
        c = m.get("content")
        text = "".join(p.get("text", "") for p in c if isinstance(p, dict)) if isinstance(c, list) else (c or "")
        out.append((str(m.get("role")), text))
    return out


def test_the_page_opens_on_what_the_proxy_sent(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    fake, url = upstream
    config = Config.parse(policy={"mask_after": 1, "protect": ["cat f2.py"]}, boundary={"rule": "fixed"}, cache="openai")  # not the defaults
    cfg = ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off", config=config, context_tools=False)
    turns = 12
    fake.script(*[("bash", {"command": f"cat f{i}.py"}) for i in range(turns)])
    before = len(fake.requests)

    async def go() -> tuple[list[dict[str, Any]], str]:
        async with asgi_proxy(cfg) as c:
            msgs: list[dict[str, Any]] = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix it."}]
            for i in range(turns):
                r = await c.post(
                    "/v1/chat/completions",
                    json={"model": "m", "messages": msgs, "tools": BASH_TOOLS},
                    headers={**AUTH, "X-Refold-Session": "v"},
                )
                m = r.json()["choices"][0]["message"]
                msgs += [m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": _code(i)}]
            page = await c.get("/sessions/v/view", headers=AUTH)
            assert page.status_code == 200
            return msgs, page.text

    msgs, page = asyncio.run(go())
    sent = [req["body"]["messages"] for req in fake.requests[before:]]
    assert len(sent) == turns
    assert json.dumps("sent (this proxy's settings)")[1:-1] in page and f'"default":"{SENT}"' in page.replace(" ", "")

    # the variant's prompts are the upstream's, call by call (the history is the client's conversation)
    history = History.from_messages(msgs[:-1])  # the last tool result is sent with no call after it
    prompts = list(sent_variant(config).projector.prompts(history))
    assert len(prompts) == turns
    for t, (prompt, received) in enumerate(zip(prompts, sent, strict=True)):
        assert _texts(prompt.messages) == _texts(received), t
    assert any("hidden" in text for _, text in _texts(sent[-1]))  # masking acted: a test that can fail
    assert sum(_code(2) in text for _, text in _texts(sent[-1])) == 1  # the protected read is whole
