"""``refold view``: one self-contained HTML file to scrub through a run's model calls.

    build_report(history, ...) -> str     the report for a loaded History
    write_report(path_in, path_out, ...)  load any trajectory ``refold replay`` reads, write the report

The page shows, per call, the history so far next to the prompt a policy sends, every piece
colored by how it is shown, the model's reply with its PROGRESS/STALE lines, and per-call prompt
size with a simulated prefix cache against base. It works offline: no CDN, no network request.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from ...config import Config
from ...errors import PolicyError, RefoldError
from ...history import History
from ...integrations.saved import config_of
from ...loaders import load
from ...tokens import TOKENIZER_NAMES, Tokenizer, get_tokenizer
from ..replay import STALE_SOURCES, Options
from ..replay.prefix import PREFIX_FORMATS, request_prefix
from ..replay.settings import check_policy_options, request_tools
from .data import VIEW_FORMAT, Progress, build_data
from .page import render_page
from .variants import MECHANISMS, SENT, SWITCHES, build_variants, sent_variant

__all__ = ["MECHANISMS", "SWITCHES", "VIEW_FORMAT", "Progress", "build_report", "write_report"]


def _version() -> str:
    try:
        return metadata.version("refold")
    except metadata.PackageNotFoundError:
        return ""


def _tokenizer(tokenizer: str | Tokenizer) -> Tokenizer:
    if not isinstance(tokenizer, str):
        return tokenizer
    if tokenizer not in TOKENIZER_NAMES:
        raise PolicyError(f"unknown tokenizer '{tokenizer}'; valid choices: {', '.join(TOKENIZER_NAMES)}")
    return get_tokenizer(tokenizer)


def _budget_lines(variants: Sequence[str] | None) -> bool:
    """Whether a chosen policy's prompts carry the budget line (the self-gc preset's)."""
    return variants is None or any("self-gc" in v for v in variants)


def build_report(
    history: History,
    *,
    variants: Sequence[str] | None = None,
    title: str = "",
    tokenizer: str | Tokenizer = "qwen3.6",
    stale: str = "recorded",
    mechanisms: bool = True,
    default: str = "default",
    budget: int = 32_768,
    mask_after: int | None = None,
    protect: Sequence[str] = (),
    progress: Progress | None = None,
    live: dict[str, Any] | None = None,
    served: Config | None = None,
    served_label: str = "sent (this proxy's settings)",
) -> str:
    """The HTML report for ``history``.

    ``variants``: named policies of ``refold replay`` to precompute (default: all of them; base is
    always added). ``mechanisms``: also precompute refold with every combination of the four
    switches. ``stale``: where STALE marks come from (``recorded``, ``none``, ``hindsight``...);
    anything but ``recorded`` is simulated and the page says so. ``budget`` and ``mask_after``
    are the knobs of the compact policies and of refold-best, as in ``refold replay``; ``protect``
    the ``Policy.protect`` rules of refold's policies (outputs they never hide).
    ``progress(done, total, what)`` is called as each precomputed policy is done. ``live`` (the
    proxy's session page: ``session``, ``base`` URL path, ``pins``) adds expand and pin controls.
    ``served``: the Config a proxy rendered this session with (or a refold mini run saved); its
    prompts (what the agent was sent) are added as the variant ``sent``, labeled ``served_label``,
    and the page opens on them.
    """
    if stale not in STALE_SOURCES:
        raise PolicyError(f"unknown STALE source '{stale}'; valid choices: {', '.join(STALE_SOURCES)}")
    if not len(history):
        raise RefoldError("the history has no steps: there is no model call to show")
    check_policy_options(budget, mask_after, protect, flags=False)
    tok = _tokenizer(tokenizer)
    extra: dict[str, Any] = {} if mask_after is None else {"mask_after": mask_after}
    if protect:
        extra["policy_overrides"] = {"protect": tuple(protect)}
    if _budget_lines(variants) and str(history.meta.get("format") or "") in PREFIX_FORMATS:
        est = request_prefix(history, tok, request_tools(history, "base"))[1]  # as refold replay's
        extra["unrecorded_tokens"] = est.provider_tokens if est is not None else 0
    chosen = build_variants(variants, Options(tokenizer=tok, budget=budget, **extra), mechanisms=mechanisms)
    if served is not None:
        chosen.insert(1, sent_variant(served, served_label))
        default = SENT
    data = build_data(history, chosen, tok, title=title, stale=stale, default=default, progress=progress)
    if live is not None:
        data["live"] = dict(live)
    return render_page(data, version=_version())


def write_report(
    path_in: str | Path,
    path_out: str | Path,
    *,
    variants: Sequence[str] | None = None,
    title: str = "",
    tokenizer: str | Tokenizer = "qwen3.6",
    stale: str = "recorded",
    mechanisms: bool = True,
    budget: int = 32_768,
    mask_after: int | None = None,
    protect: Sequence[str] = (),
    progress: Progress | None = None,
) -> Path:
    """Load a recorded run (any format ``refold.loaders.load`` reads) and write its report. A
    refold mini run opens on ``sent``: its prompts under the Config the run saved."""
    history = load(path_in)
    page = build_report(
        history,
        variants=variants,
        title=title,
        tokenizer=tokenizer,
        stale=stale,
        mechanisms=mechanisms,
        budget=budget,
        mask_after=mask_after,
        protect=protect,
        progress=progress,
        served=config_of(history),
        served_label="sent (this run's settings)",
    )
    out = Path(path_out)
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as e:
        raise RefoldError(f"cannot write {out}: {e.strerror or e}") from None
    return out
