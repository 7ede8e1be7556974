"""What the mini wrapper writes into a run: the ``extra.refold`` record of each call, the
observation message that answers a context command (``refold.wire`` reads both back), and the
user's pins (``info.refold_pins``: ``pinning.pin_record`` records, in order; ``refold sessions
pin RUN.traj.json 7`` adds one, and a live run reads them from its ``refold_pins`` file; the reader,
``formats.mini.read_pins``, is the loaders')."""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..formats.mini import read_pins
from ..history import History
from ..messages import clean
from ..tokens import Tokenizer
from ..types import Answer, Message, Rendered
from ..wire import observation
from .cache_control import breakpoints

FORMAT = "refold-mini-1"
"""Version of the ``extra.refold`` record added to each assistant message."""


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file), keeping its mode;
    a file the user may not write stays untouched (PermissionError)."""
    path = Path(path)
    if path.is_symlink():  # write the run it points at: replacing the link left that run unchanged
        path = path.resolve()
    mode = None
    if path.exists():
        if not os.access(path, os.W_OK):
            raise PermissionError(13, "the file is read-only", str(path))
        mode = path.stat().st_mode & 0o7777
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            text = json.dumps(data, indent=2, ensure_ascii=False).encode()
        except UnicodeEncodeError:  # a lone surrogate (as recorded) only fits as its \u escape
            text = json.dumps(data, indent=2).encode()
        was_gzip = False
        if path.exists():
            with path.open("rb") as f:
                was_gzip = f.read(2) == b"\x1f\x8b"
        tmp.write_bytes(gzip.compress(text) if was_gzip or path.name.endswith(".gz") else text)  # as it was
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def call_info(
    history: History,
    rendered: Rendered | None,
    sent: list[Message],
    chat: list[Message],
    tokenizer: Tokenizer | None,
    cache_control: bool,
) -> dict[str, Any]:
    """The record of one model call: what was sent, how it was rendered, its wall time and token counts."""
    info: dict[str, Any] = {
        "format": FORMAT,
        "t": len(history),
        "messages": len(sent),
        "base_messages": len(chat),
        "time": round(time.time(), 3),  # when the call was made: idle gaps decide when the cache is cold
    }
    if rendered is not None:
        s = rendered.stats
        info |= {
            "boundary": s.boundary,
            "stubs": s.stubs,
            "trimmed": s.trimmed,
            "folded_steps": s.folded_steps,
            "notes": s.notes,
            "restores": s.restores,
            "render_ms": round(s.render_ms, 3),
        }
        if cache_control:
            info["cache_breakpoints"] = breakpoints(rendered)
    if tokenizer is not None:
        from ..chat_tokens import count_messages

        info["tokenizer"] = tokenizer.name
        info["prompt_tokens"] = count_messages([clean(m) for m in sent], tokenizer)
        info["base_prompt_tokens"] = count_messages([clean(m) for m in chat], tokenizer)
    return info


def answer_message(name: str, answer: Answer, tool_call_id: str | None) -> dict[str, Any]:
    """The observation that answers context command ``name`` (a tool message for a tool call)."""
    msg = observation(name, answer, tool_call_id)
    mini = {"raw_output": answer.text, "returncode": 0, "timestamp": time.time(), "exception_info": ""}
    msg["extra"] = mini | msg["extra"]
    return msg


def usage(response: Any) -> dict[str, Any]:
    """The provider's own prompt/cached token counts, when the inner model recorded a response
    (a chat completion's ``usage``, or a Responses API response's)."""
    found = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(found, dict):
        return {}
    out: dict[str, Any] = {}
    prompt = found.get("prompt_tokens", found.get("input_tokens"))  # chat / Responses API names
    if isinstance(prompt, int):
        out["provider_prompt_tokens"] = prompt
    details = found.get("prompt_tokens_details", found.get("input_tokens_details"))
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = found.get("cache_read_input_tokens")  # Anthropic's name, when litellm passes it on
    if isinstance(cached, int):
        out["provider_cached_tokens"] = cached
    if isinstance(found.get("cache_creation_input_tokens"), int):
        out["provider_cache_write_tokens"] = found["cache_creation_input_tokens"]
    return out


def extends(history: History, chat: Sequence[Message]) -> bool:
    """Whether ``chat`` can be the same run as ``history`` (same prefix, not shorter)."""
    prefix = history.prefix
    known = len(prefix) + sum(1 + len(s.observations) for s in history.steps)
    return len(chat) >= known and all(a == b for a, b in zip(prefix, chat, strict=False))


class PinFile:
    """A live run's pins file (``refold_pins``): re-read when it changes, so a pin set meanwhile
    shows in the agent's next prompt. A missing or malformed file keeps the pins read before."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path).expanduser() if path else None
        self.records: list[dict[str, Any]] = []
        self._seen: tuple[int, int] | None = None

    def changed(self, history: History) -> bool:
        """Read the file if it changed; True when ``history`` must be rebuilt with new records
        (pins are append-only in a History; new records at the end are simply loaded)."""
        if self.path is None:
            return False
        try:
            st = self.path.stat()
            if (st.st_mtime_ns, st.st_size) == self._seen:
                return False
            self._seen = (st.st_mtime_ns, st.st_size)
            records = read_pins(json.loads(self.path.read_text(encoding="utf-8")), str(self.path))
        except (OSError, ValueError):
            return False
        old, self.records = self.records, records
        if records[: len(old)] == old:
            history.load_pins(records[len(old) :])
            return False
        return True
