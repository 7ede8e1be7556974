"""Assemble the single-file HTML report: template + inlined CSS/JS + the embedded JSON data."""

from __future__ import annotations

import html
import json
import re
from functools import cache
from importlib import resources
from typing import Any

ASSETS = ("charts.js", "viewer.js", "ui.js", "controls.js")


@cache
def _asset(name: str) -> str:
    return resources.files("refold.lab.viewer").joinpath(name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: every ``<`` escaped, so no text
    in the data can close the script element or open a comment."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


LIVE_CSP = ("connect-src 'none'; form-action 'none'", "connect-src 'self'; form-action 'none'")


def render_page(data: dict[str, Any], *, version: str = "") -> str:
    """The report as one HTML string; it makes no network request (CSP ``default-src 'none'``).

    With ``data["live"]`` (a page the proxy serves for one session) it also carries ``live.js`` and
    may call its own origin (``connect-src 'self'``) to expand and pin items of that session."""
    live = data.get("live") is not None
    js = "\n".join(_asset(n) for n in (*ASSETS, "live.js")[: len(ASSETS) + live])
    parts = {
        "/*__CSS__*/": _asset("viewer.css"),
        "/*__JS__*/": js.replace("</script", "<\\/script"),
        "__TITLE__": html.escape(str(data.get("title", ""))),
        "__VERSION__": html.escape(version),
        "__DATA__": embed_json(data),
    }
    page = _asset("template.html")
    if live:
        if LIVE_CSP[0] not in page:
            raise RuntimeError("viewer template lacks its connect-src policy")
        page = page.replace(*LIVE_CSP)
    for marker in parts:
        if marker not in page:
            raise RuntimeError(f"viewer template lacks {marker}")
    # one pass, so a title (or data) that contains a marker is never substituted again
    pattern = re.compile("|".join(re.escape(m) for m in parts))
    return pattern.sub(lambda m: parts[m.group(0)], page, count=len(parts))
