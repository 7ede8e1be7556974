"""The names a text uses that a prompt may show (paths, test ids, error strings, identifiers): the keys
of hidden-then-needed (lab/replay/needed.py) and of masking by last use (mechanisms/use.py).

Keys are extracted by one function, :func:`keys_of`, applied in the same way to replies, outputs
and rendered messages (for tool calls: the string values of the JSON arguments, not the
argument names):

* **paths**: a run of ``[A-Za-z0-9_.+-/]`` holding a ``/`` (no ``//``, so no URLs) whose last
  component has a letter and either an extension (``.py``, ``.txt``: 1-8 alphanumerics) or at
  least two components and 8 characters, or a bare ``name.ext`` with a source-file extension.
  A path is indexed under its last two components (``models/query.py``) and its basename
  (``query.py``), so ``/testbed/django/db/models/query.py`` and ``./django/db/models/query.py``
  are the same path; a reply's path is looked up by its most specific key (the last two
  components when it has them). Generic basenames (``__init__.py``, ``setup.py``, ...) and
  paths every model knows (``/dev/null``, ``/usr/bin/env``, ``application/json``) are never
  keys. A shown path also shows its folders: ``src/agents/core/run.ts`` holds ``src/agents``
  and ``agents/core`` (any two adjacent folders), so a reply naming the folder is not counted
  while a file under it is shown.
* **identifiers**: a word ``[A-Za-z_][A-Za-z0-9_]*`` of at least 8 characters with an inner
  underscore (``snake_case``, ``ALL_CAPS``) or a lower-to-upper change (``CamelCase``,
  ``camelCase``), read anywhere, also inside paths and dotted names (``billing_engine`` in
  ``pkg/billing_engine.py``, ``QuerySet`` in ``models.QuerySet.filter``). Not keys: dunders, Python
  keywords and builtins (``NotImplementedError``), ``unittest.TestCase`` attributes
  (``assertEqual``), public names of a few everyday stdlib modules (``io``, ``os``, ``typing``,
  ``subprocess``, ...: ``TextIOWrapper``), as Python 3.11 has them (a list shipped with refold, so the
  figures do not move with the Python it runs on) -- names any model knows without being shown them. Plain words and numbers
  never qualify (no underscore, no case change, or no letter). An identifier is shown in
  any spelling of its words: ``InvoiceExportController`` shows ``invoice_export_controller``
  (Phoenix's module and file, a JSON field and its camelCase variable); every identifier also
  holds its folded form (:func:`folded`: lower case, no ``_``), and a reply's identifier is
  hidden only when neither form is shown.
* **test ids**: ``path.py::Name::test[param]``, keyed by the basename and the rest
  (``test_query.py::QueryTests::test_filter``).
* **error strings**: ``XxxError: message`` / ``XxxException: message``, keyed by the name and
  the first 40 characters of the message (up to a backtick or line end), at least 4 of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

from .types import content_text

__all__ = [
    "ERROR_CHARS",
    "GENERIC_BASENAMES",
    "GENERIC_PATHS",
    "KNOWN_NAMES",
    "MIN_IDENT",
    "folded",
    "keys_of",
    "message_text",
    "reply_keys",
]

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
GENERIC_PATHS = frozenset(
    {
        "dev/null",
        "dev/stdout",
        "dev/stderr",
        "dev/stdin",
        "bin/env",
        "bin/bash",
        "bin/python",
        "bin/python3",
        "usr/bin",
        "usr/local",
        "application/json",
        "application/xml",
        "text/plain",
        "text/html",
    }
)
"""System paths and media types (last two components) any model writes unprompted: never keys."""
_FOLD = "~"  # no key starts with it: paths and identifiers never hold a "~"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _known_names() -> frozenset[str]:
    text = resources.files("refold.data").joinpath("known_names.txt").read_text(encoding="utf-8")
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


KNOWN_NAMES = _known_names()
"""Identifiers any model knows without being shown them: never keys. Shipped as data
(``refold/data/known_names.txt``, written by ``tools/known_names.py`` from Python 3.11), not read
from ``dir()`` of the running Python, so which names count as hidden does not shift with its version."""


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
                parts.extend(strings_in(json.loads(args)))
            except ValueError:
                parts.append(args)
        elif isinstance(args, dict):
            parts.extend(strings_in(args))
    return "\n".join(parts)


def strings_in(value: Any) -> Iterable[str]:
    """Every string inside a JSON-like value (dict values, list items), depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)


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
    return tuple(k for k in keys if k.rsplit("/", 1)[-1] not in GENERIC_BASENAMES and k not in GENERIC_PATHS)


def _folder_keys(token: str) -> list[str]:
    """The keys of the folders a path shows (each two adjacent folders, as a folder named alone is
    keyed); the last two components are the path's own key."""
    parts = [p for p in token.rstrip(".-").split("/") if p not in ("", ".", "..")]
    return [
        pair
        for i in range(len(parts) - 2)
        if len(pair := f"{parts[i]}/{parts[i + 1]}") >= MIN_IDENT and any(c.isalpha() for c in parts[i + 1])
    ]


def folded(key: str) -> str | None:
    """The form an identifier key is also held under, any spelling of its words alike
    (``~invoiceexportcontroller``); None for a path, test id or error string."""
    if _IDENT.fullmatch(key) is None:
        return None
    return _FOLD + key.replace("_", "").lower()


def _scan(text: str) -> tuple[set[str], set[str]]:
    """(every key ``text`` holds, the most specific key of each thing it names)."""
    every: set[str] = set()
    named: set[str] = set()
    for token in _PATHISH.findall(text):
        keys = _path_keys(token)
        if keys:
            every.update(keys)
            named.add(keys[0])
            if token.count("/") >= 2:
                every.update(_folder_keys(token))
    for w in _LONG_WORD.findall(text):
        if _identifier(w):
            every.add(w)
            every.add(_FOLD + w.replace("_", "").lower())
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
