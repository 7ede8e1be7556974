"""Hidden-then-needed: how often a policy hid something the agent's next reply goes on to use.

For the prompt of call ``t + 1`` (rendered from steps ``1..t``) the *recorded reply* is step
``t + 1``'s reply: what the agent actually wrote after that call in the recorded run. A call is
**hidden-then-needed** when that reply names a *key* (defined below) that

1. occurs in the recorded history before the call (the reply or an output of a step ``<= t``),
2. does not occur in any message of the rendered prompt (system, task, replies, outputs, and the
   text of every stub, trim marker, note, mask note, span block or summary), and
3. does not occur in the history's prefix (system prompt and task as recorded).

So its only occurrences before the call are in content the policy did not show (stubbed, trimmed,
folded, masked, cleared, summarized): an agent working from that prompt would have had to
``restore`` it (or guess). The *restore cost* of such a call is the size, in the replay's
tokenizer, of the recorded pieces (a step's reply or one of its outputs) that contain a needed key
in the latest step that held it (one ``restore`` of that step suffices), each piece counted once
per call however many keys it holds.

Keys are extracted by one function, :func:`keys_of`, applied in the same way to replies, outputs
and rendered messages (for tool calls: the string values of the JSON arguments, not the
argument names):

* **paths**: a run of ``[A-Za-z0-9_.+-/]`` holding a ``/`` (no ``//``, so no URLs) whose last
  component has a letter and either an extension (``.py``, ``.txt``: 1-8 alphanumerics) or at
  least two components and 8 characters, or a bare ``name.ext`` with a source-file extension.
  A path is indexed under its last two components (``models/query.py``) and its basename
  (``query.py``), so ``/testbed/django/db/models/query.py`` and ``./django/db/models/query.py``
  are the same path; a reply's path is looked up by its most specific key (the last two
  components when it has them). Generic basenames (``__init__.py``, ``setup.py``, ...) are
  never keys.
* **identifiers**: a word ``[A-Za-z_][A-Za-z0-9_]*`` of at least 8 characters with an inner
  underscore (``snake_case``, ``ALL_CAPS``) or a lower-to-upper change (``CamelCase``,
  ``camelCase``), read anywhere, also inside paths and dotted names (``billing_engine`` in
  ``pkg/billing_engine.py``, ``QuerySet`` in ``models.QuerySet.filter``). Not keys: dunders, Python
  keywords and builtins (``NotImplementedError``), ``unittest.TestCase`` attributes
  (``assertEqual``), public names of a few everyday stdlib modules (``io``, ``os``, ``typing``,
  ``subprocess``, ...: ``TextIOWrapper``) -- names any model knows without being shown them. Plain words and numbers
  never qualify (no underscore, no case change, or no letter).
* **test ids**: ``path.py::Name::test[param]``, keyed by the basename and the rest
  (``test_query.py::QueryTests::test_filter``).
* **error strings**: ``XxxError: message`` / ``XxxException: message``, keyed by the name and
  the first 40 characters of the message (up to a backtick or line end), at least 4 of them.

Everything is indexed once per history (one pass over each step's reply and outputs) and each
distinct rendered message text once (a memo keyed by the text object), so the per-call work is a
few set lookups per key of the reply.
"""

from __future__ import annotations

import builtins
import collections
import datetime
import functools
import io
import itertools
import json
import keyword
import logging
import os
import pathlib
import re
import subprocess
import sys
import typing
import unittest
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...chat_tokens import message_tokens
from ...history import History
from ...messages import clean
from ...tokens import Tokenizer
from ...types import Message, Origin, Shown, content_text
from .policies import Projector, Prompt

__all__ = [
    "NEEDED_NOTE",
    "NeededCall",
    "NeededIndex",
    "NeededTap",
    "NeededTotals",
    "hidden_then_needed",
    "keys_of",
    "message_text",
    "reply_keys",
]

NEEDED_NOTE = (
    "Hidden-then-needed (estimated from recorded replies): calls whose next recorded reply names a "
    "path, identifier, test id or error string that occurred before the call only in content the "
    "prompt did not show; restore tokens: the size of the recorded pieces holding them, once per "
    "piece per call. Definitions: refold.lab.replay.needed."
)

MIN_IDENT = 8
ERROR_CHARS = 40

# Only runs holding a "/" or a ".": the candidates for paths (most words are neither).
_PATHISH = re.compile(r"(?<![A-Za-z0-9_.+/-])[A-Za-z0-9_.+/-]*[/.][A-Za-z0-9_.+/-]*")
_LONG_WORD = re.compile(rf"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]{{{MIN_IDENT - 1},}}")
_TEST_ID = re.compile(r"([A-Za-z0-9_./-]+\.py)::([A-Za-z0-9_:.\[\]-]+)")
_ERROR = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception)): ([^\n`]{4,})")
_EXT = re.compile(r"\.[A-Za-z0-9]{1,8}$")
_SNAKE = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]")
_CAMEL = re.compile(r"[a-z][A-Z]")
_SOURCE_EXT = frozenset(
    re.findall(
        r"\w+",
        "py pyi pyx js jsx ts tsx go rs java kt c h cc cpp hpp cs rb php swift scala sh toml yaml yml "
        "json cfg ini txt md rst html css sql xml lock",
    )
)
GENERIC_BASENAMES = frozenset(
    {
        "__init__.py",
        "__main__.py",
        "setup.py",
        "setup.cfg",
        "conftest.py",
        "README.md",
        "README.rst",
        "pyproject.toml",
        "requirements.txt",
        "package.json",
        "Makefile",
    }
)
_STDLIB = (
    collections,
    datetime,
    functools,
    io,
    itertools,
    json,
    logging,
    os,
    os.path,
    pathlib,
    re,
    subprocess,
    sys,
    typing,
)
KNOWN_NAMES = (
    frozenset(dir(builtins))
    | frozenset(keyword.kwlist)
    | frozenset(n for n in dir(unittest.TestCase) if not n.startswith("_"))
    | frozenset(n for m in _STDLIB for n in dir(m) if not n.startswith("_"))
    | {"NoneType"}
)
"""Identifiers any model knows without being shown them: never keys."""


def message_text(message: Mapping[str, Any]) -> str:
    """The text a model reads in a message: its content and the string arguments of its tool calls."""
    text = content_text(message.get("content"))
    calls = message.get("tool_calls")
    if not calls:
        return text
    parts = [text]
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(args, str):
            try:
                parts.extend(_strings(json.loads(args)))
            except ValueError:
                parts.append(args)
        elif isinstance(args, dict):
            parts.extend(_strings(args))
    return "\n".join(parts)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _identifier(word: str) -> bool:
    return (
        len(word) >= MIN_IDENT
        and not (word.startswith("__") and word.endswith("__"))
        and word not in KNOWN_NAMES
        and (_SNAKE.search(word) is not None or _CAMEL.search(word) is not None)
    )


def _path_keys(token: str) -> tuple[str, ...]:
    """Keys of a path-like token, most specific first; () if it is not a path."""
    token = token.rstrip(".-")
    if "/" not in token:  # a bare file name: only with a source-file extension
        stem, dot, ext = token.rpartition(".")
        if not dot or ext not in _SOURCE_EXT or not stem.strip(".") or token in GENERIC_BASENAMES:
            return ()
        return (token,)
    if "//" in token:
        return ()
    parts = [p for p in token.split("/") if p not in ("", ".", "..")]
    if not parts or not any(c.isalpha() for c in parts[-1]):
        return ()
    base = parts[-1]
    has_ext = _EXT.search(base) is not None
    if not (has_ext or (len(parts) >= 2 and len(token) >= MIN_IDENT)):
        return ()
    keys = ["/".join(parts[-2:])] if len(parts) >= 2 else []
    if has_ext:
        keys.append(base)
    return tuple(k for k in keys if k.rsplit("/", 1)[-1] not in GENERIC_BASENAMES)


def _scan(text: str) -> tuple[set[str], set[str]]:
    """(every key ``text`` holds, the most specific key of each thing it names)."""
    every: set[str] = set()
    named: set[str] = set()
    for token in _PATHISH.findall(text):
        keys = _path_keys(token)
        if keys:
            every.update(keys)
            named.add(keys[0])
    for w in _LONG_WORD.findall(text):
        if _identifier(w):
            every.add(w)
            named.add(w)
    if "::" in text:
        for m in _TEST_ID.finditer(text):
            key = f"{m.group(1).rsplit('/', 1)[-1]}::{m.group(2).rstrip('.:-')}"
            every.add(key)
            named.add(key)
    if "Error: " in text or "Exception: " in text:
        for m in _ERROR.finditer(text):
            msg = m.group(2).strip()[:ERROR_CHARS].rstrip()
            if len(msg) >= 4:
                key = f"{m.group(1)}: {msg}"
                every.add(key)
                named.add(key)
    return every, named


def keys_of(text: str) -> frozenset[str]:
    """Every key ``text`` holds (paths under both their keys); see the module docstring."""
    return frozenset(_scan(text)[0])


def reply_keys(text: str) -> frozenset[str]:
    """The keys a reply *names*: each path by its most specific key only."""
    return frozenset(_scan(text)[1])


@dataclass(frozen=True, slots=True)
class NeededCall:
    """One hidden-then-needed call: the keys, and the recorded pieces ``(step, j)`` holding them
    (``j`` 0 is the step's reply, ``j`` >= 1 its output ``j - 1``) with their restore cost."""

    t: int
    keys: tuple[str, ...]
    pieces: tuple[tuple[int, int], ...]
    restore_tokens: int


@dataclass(slots=True)
class NeededTotals:
    calls: int = 0
    needed_calls: int = 0
    restore_tokens: int = 0
    examples: list[NeededCall] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.needed_calls / self.calls if self.calls else 0.0


class NeededIndex:
    """The keys of one history, indexed once; :meth:`check` answers for one rendered prompt.

    Shared by every policy replayed on the same history (the marked copy a STALE policy sees has
    the same replies and outputs).
    """

    def __init__(self, history: History, tok: Tokenizer) -> None:
        self.history = history
        self.tok = tok
        self._prefix = frozenset().union(*(keys_of(message_text(m)) for m in history.prefix))
        self._where: dict[str, list[tuple[int, int]]] = {}
        self._replies: list[frozenset[str]] = []
        self._pieces: dict[tuple[int, int], Message] = {}
        self._cost: dict[tuple[int, int], int] = {}
        self._by_id: dict[int, tuple[object, frozenset[str]]] = {}
        self._by_text: dict[str, frozenset[str]] = {}
        for s in history.steps:
            reply = message_text(s.reply)
            self._replies.append(reply_keys(reply) - self._prefix)
            for j, msg in enumerate((s.reply, *s.observations)):
                self._pieces[(s.index, j)] = msg
                text = reply if j == 0 else message_text(msg)
                for k in self._memo_text(text):
                    self._where.setdefault(k, []).append((s.index, j))

    def _memo_text(self, text: str) -> frozenset[str]:
        keys = self._by_text.get(text)
        if keys is None:
            keys = self._by_text[text] = keys_of(text)
        return keys

    def _keys_of_message(self, m: Message) -> frozenset[str]:
        hit = self._by_id.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        keys = self._memo_text(message_text(m))
        self._by_id[id(m)] = (m, keys)  # holding m keeps its id from being reused
        return keys

    def restore_tokens(self, piece: tuple[int, int]) -> int:
        n = self._cost.get(piece)
        if n is None:
            n = self._cost[piece] = len(message_tokens(clean(self._pieces[piece]), self.tok))
        return n

    def check(self, t: int, messages: Sequence[Message], origins: Sequence[Origin]) -> NeededCall | None:
        """The hidden-then-needed finding of the prompt of call ``t + 1``, or None."""
        if t >= len(self._replies):
            return None  # no recorded reply to check
        shown: set[tuple[int, int]] | None = None
        other: list[Message] = []
        needed: list[str] = []
        pieces: set[tuple[int, int]] = set()
        for key in sorted(self._replies[t]):
            before = [p for p in self._where.get(key, ()) if p[0] <= t]
            if not before:
                continue  # new to the run: nothing was hidden
            if shown is None:
                shown, other = _split(messages, origins)
            if any(p in shown for p in before) or any(key in self._keys_of_message(m) for m in other):
                continue
            needed.append(key)
            latest = before[-1][0]  # one restore, of the latest step that held it, suffices
            pieces.update(p for p in before if p[0] == latest)
        if not needed:
            return None
        ordered = tuple(sorted(pieces))
        return NeededCall(t, tuple(needed), ordered, sum(self.restore_tokens(p) for p in ordered))


_VERBATIM = frozenset({Shown.RECEIVED, Shown.RESTORED})


def _split(
    messages: Sequence[Message], origins: Sequence[Origin]
) -> tuple[set[tuple[int, int]], list[Message]]:
    """(recorded pieces shown verbatim, as ``(step, j)``; every other message of the prompt).

    A verbatim piece is the recorded text plus protocol lines (``[step N]``, reminders), so it
    holds every key of the recorded piece; a step's reply and outputs are laid out in order.
    """
    shown: set[tuple[int, int]] = set()
    other: list[Message] = []
    nxt: dict[int, int] = {}
    for m, o in zip(messages, origins, strict=True):
        if o.step is None or o.part not in ("reply", "output"):
            other.append(m)
            continue
        j = 0 if o.part == "reply" else nxt.get(o.step, 1)
        if o.part == "output":
            nxt[o.step] = j + 1
        if o.shown in _VERBATIM:
            shown.add((o.step, j))
        else:
            other.append(m)
    return shown, other


class NeededCounter:
    """Accumulates :class:`NeededTotals` over the prompts of one policy on one history."""

    def __init__(self, index: NeededIndex, keep_examples: int = 0) -> None:
        self.index = index
        self.totals = NeededTotals()
        self.keep_examples = keep_examples

    def add(self, t: int, messages: Sequence[Message], origins: Sequence[Origin]) -> None:
        self.totals.calls += 1
        found = self.index.check(t, messages, origins)
        if found is None:
            return
        self.totals.needed_calls += 1
        self.totals.restore_tokens += found.restore_tokens
        if len(self.totals.examples) < self.keep_examples:
            self.totals.examples.append(found)


class NeededTap:
    """A projector that passes ``inner``'s prompts through and counts hidden-then-needed calls
    on the way, so ``measure`` needs no change to report them."""

    def __init__(self, inner: Projector, index: NeededIndex) -> None:
        self.inner = inner
        self.name = inner.name
        self.counter = NeededCounter(index)

    @property
    def totals(self) -> NeededTotals:
        return self.counter.totals

    def prompts(self, history: History) -> Iterator[Prompt]:
        for p in self.inner.prompts(history):
            self.counter.add(p.t, p.messages, p.origins)
            yield p


def hidden_then_needed(
    history: History,
    prompts: Iterable[tuple[int, Sequence[Message], Sequence[Origin]]],
    tok: Tokenizer,
    *,
    index: NeededIndex | None = None,
    keep_examples: int = 0,
) -> NeededTotals:
    """Totals over ``prompts`` (``(t, messages, origins)`` of call ``t + 1``) of ``history``."""
    counter = NeededCounter(index or NeededIndex(history, tok), keep_examples)
    for t, messages, origins in prompts:
        counter.add(t, messages, origins)
    return counter.totals
