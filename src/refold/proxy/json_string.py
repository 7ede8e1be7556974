"""JSON string values decoded as a stream delivers their text (the proxy's early relay and its
compound hold read a tool call's arguments before they are whole)."""

from __future__ import annotations

import re

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\", "/": "/"}
_LOW = re.compile(r"[dD][c-fC-F][0-9a-fA-F]{2}")  # the low half of a surrogate pair


class JsonString:
    """A JSON string decoded as its text arrives, with where each character begins in it; ``bad``:
    an escape JSON does not have (the string ends there, ``closed``)."""

    def __init__(self, start: int) -> None:
        self.value = ""
        self.closed = False
        self.bad = False
        self._offsets: list[int] = []
        self._pos = start  # the next character of the JSON text to read

    def add(self, text: str) -> str:
        """Read ``text`` (all of the JSON text so far) on from where the last call stopped; the
        characters decoded by this call (an escape cut in two waits for its end)."""
        i, out = self._pos, []
        while i < len(text) and not self.closed:
            ch = text[i]
            if ch == '"':
                self.closed = True
                break
            if ch != "\\":
                out.append(ch)
                self._offsets.append(i)
                i += 1
                continue
            if i + 1 >= len(text):
                break
            esc = text[i + 1]
            if esc == "u":
                code = text[i + 2 : i + 6]
                if len(code) < 4:
                    break
                try:
                    cp = int(code, 16)
                except ValueError:  # bad JSON: the arguments are read whole at the end
                    self.closed = self.bad = True
                    break
                size = 6
                if 0xD800 <= cp < 0xDC00:  # ``\ud83d\ude00``: one character, as ``json.loads`` reads it
                    low = text[i + 6 : i + 12]
                    if len(low) < 6 and "\\u".startswith(low[:2]):
                        break  # its low half may still come
                    if low[:2] == "\\u" and _LOW.fullmatch(low[2:]):
                        cp, size = 0x10000 + ((cp - 0xD800) << 10) + (int(low[2:], 16) - 0xDC00), 12
                out.append(chr(cp))
                self._offsets.append(i)
                i += size
                continue
            if esc not in _ESCAPES:
                self.closed = self.bad = True
                break
            out.append(_ESCAPES[esc])
            self._offsets.append(i)
            i += 2
        self._pos = i
        new = "".join(out)
        self.value += new
        return new

    @property
    def end(self) -> int:
        """Where reading stopped in the JSON text: the closing quote once ``closed``."""
        return self._pos

    def offset(self, k: int) -> int:
        """Where the ``k``-th decoded character begins in the JSON text (``k`` = all: the end read)."""
        return self._offsets[k] if k < len(self._offsets) else self._pos
