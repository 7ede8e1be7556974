"""What a replay is asked: its settings (checked, with their price table and projector options)
and the tool schemas each replayed request carried."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...chat_tokens import MINI_BASH_TOOL
from ...context import TOOL_SCHEMAS
from ...errors import PolicyError, SettingError
from ...history import History
from ...policy import Policy
from ...tokens import TOKENIZER_NAMES, get_tokenizer
from ..cache import CACHE_NAMES, DEFAULT_PRICES, Price, kv_spec, load_prices, price_for_model
from .metrics import default_price
from .policies import POLICIES
from .projectors import Options
from .stale import STALE_SOURCES

__all__ = ["AUTO_PRICE", "CONTEXT_TOOL_POLICIES", "Settings", "check_policy_options", "request_tools"]

CONTEXT_TOOL_POLICIES = frozenset({"refold", "refold-best", "compact+refold"})
"""Policies that offer refold's context tools next to the client's in a tool-call run."""

AUTO_PRICE = "auto"
"""``--price auto``: each run's own model's row (``price_for_model``), else the cache's default."""


def request_tools(history: History, policy: str) -> list[dict[str, Any]] | None:
    """The function schemas each request of ``history`` carried under ``policy``.

    A mini-swe-agent run that made tool calls sent mini's ``bash`` tool; refold's policies add
    their context tools, as refold's mini integration does. Other clients' tools are unknown
    (None: not counted).
    """
    fmt = str(history.meta.get("format") or "")
    if not history.meta.get("tool_calls") or not fmt.startswith("mini-swe-agent"):
        return None  # e.g. SWE-agent 1.x sends its own tool bundle, which the .traj does not hold
    names = {a.tool for s in history.steps for a in s.actions}
    if not names <= {"bash", *(str(t["function"]["name"]) for t in TOOL_SCHEMAS)}:
        return None
    tools: list[dict[str, Any]] = [MINI_BASH_TOOL]
    if policy in CONTEXT_TOOL_POLICIES:
        tools.extend(TOOL_SCHEMAS)
    return tools


def check_policy_options(budget: int, mask_after: int | None, protect: Sequence[str], *, flags: bool = True) -> None:
    """The options of refold's replayed policies (``replay``, ``view``): a bad one is a usage error
    named by its flag, or with ``flags=False`` by the library's argument."""
    names = ("--budget", "--mask-after", "--protect") if flags else ("budget", "mask_after", "protect")
    if budget < 1024:
        raise PolicyError(f"{names[0]} must be at least 1024 tokens, got {budget}")
    if mask_after is not None and mask_after < 1:
        raise PolicyError(f"{names[1]} must be at least 1, got {mask_after}")
    if protect:
        try:
            Policy(protect=tuple(protect))
        except SettingError as e:
            raise PolicyError(f"{names[2]}: {e.reason}") from None


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a replay depends on (picklable, so workers rebuild tokenizers themselves)."""

    policies: tuple[str, ...] = tuple(POLICIES)
    stale: str = "recorded"
    tokenizer: str = "qwen3.6"
    cache: str = "vllm"
    price: str | None = None
    prices_file: str | None = None
    kv_model: str = "qwen3.6-27b"
    budget: int = 32_768
    mask_after: int | None = None
    protect: tuple[str, ...] = ()
    """``Policy.protect`` rules for refold's policies (outputs they never hide)."""
    validate: bool = True
    per_call: bool = True
    count_calibration: bool = True
    """Price a provider whose tokenizer is not available offline on ESTIMATED counts (COUNT_CALIBRATIONS)."""
    prefix_estimate: bool = True
    """Start every call of a Claude Code / Codex session with its ESTIMATED unrecorded request
    prefix (system prompt, tool schemas; replay/prefix.py); False: the messages only."""

    def check(self) -> None:
        """Raise PolicyError (a usage error) for any unknown name."""
        for p in self.policies:
            if p not in POLICIES:
                raise PolicyError(f"unknown policy {p!r}; valid choices: {', '.join(POLICIES)}")
        if not self.policies:
            raise PolicyError("no policy selected")
        if self.stale not in STALE_SOURCES:
            raise PolicyError(f"unknown --stale {self.stale!r}; valid choices: {', '.join(STALE_SOURCES)}")
        if self.tokenizer not in TOKENIZER_NAMES:
            raise PolicyError(
                f"unknown tokenizer {self.tokenizer!r}; valid choices: {', '.join(TOKENIZER_NAMES)}"
            )
        if self.cache not in CACHE_NAMES:
            raise PolicyError(f"unknown cache {self.cache!r}; valid choices: {', '.join(CACHE_NAMES)}")
        check_policy_options(self.budget, self.mask_after, self.protect)
        try:
            kv_spec(self.kv_model)
        except ValueError as e:
            raise PolicyError(f"--kv-model: {e}") from None
        self.price_table()

    def unpriced(self, model: str | None) -> bool:
        """``--price auto`` found no row for ``model`` (priced with the cache's default row)."""
        return self.price == AUTO_PRICE and price_for_model(model, self._table()) is None

    def price_name(self, model: str | None = None) -> str:
        """The price row: ``--price``, or with ``auto`` the run's model's row, else the cache's."""
        if self.price == AUTO_PRICE:
            return price_for_model(model, self._table()) or default_price(self.cache)
        return self.price or default_price(self.cache)

    def _table(self) -> dict[str, Price]:
        table = dict(DEFAULT_PRICES)
        if self.prices_file:
            try:
                table.update(load_prices(self.prices_file))
            except ValueError as e:
                raise PolicyError(str(e)) from None
        return table

    def price_table(self, model: str | None = None) -> Price:
        table = self._table()
        name = self.price_name(model)
        if name not in table:
            raise PolicyError(f"unknown price {name!r}; known: {', '.join(sorted(table))}")
        return table[name]

    def options(self) -> Options:
        extra: dict[str, Any] = {} if self.mask_after is None else {"mask_after": self.mask_after}
        if self.protect:
            extra["policy_overrides"] = {"protect": self.protect}
        return Options(tokenizer=get_tokenizer(self.tokenizer), budget=self.budget, cache=self.cache, **extra)
