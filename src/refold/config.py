"""One frozen ``Config``: every setting of refold and its default, in one place.

    Config                       what the renderer, mini, the proxy, replay and the viewer all read
    ├── policy    Policy         the seed's switches and thresholds (k, dedup, fold, masking, ...)
    ├── spans     SpanPolicy     begin_span / fold_span (seed 001)
    ├── ledger    LedgerPolicy   fold / drop / expand / search_ledger and the budget line (seed 002)
    ├── prompt    PromptConfig   where the protocol text goes
    ├── boundary  BoundaryConfig when the boundary moves: the seed's fixed rule, or only when it pays
    ├── cache     str            cache profile whose prices the cost rule uses
    ├── tokenizer str            tokenizer for reported token counts
    └── mechanisms tuple[str]    the projection rules that shape steps behind the boundary, in order

Built from keyword arguments (``Config.parse(k=4, spans={"prompt": True})``; a policy field may be
given at the top level), from ``a.b=value`` overrides as mini-swe-agent's ``-c`` takes them
(``config.override(["policy.k=4", "boundary.rule=fixed"])``), and from a saved run
(``Config.from_saved(info["config"]["refold"])``). An invalid value is one ``PolicyError`` line
naming the field and what it accepts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal, get_args

from pydantic import BaseModel, Field, ValidationError, field_validator

from .errors import PolicyError
from .mechanisms.ledger import LedgerPolicy
from .mechanisms.spans import SpanPolicy
from .policy import Policy, Settings
from .tokens import TOKENIZER_NAMES, tokenizer_name

MECHANISMS = ("spans", "fold", "dedup", "ledger", "masking", "replies", "objects", "pins")
"""The built-in mechanisms in their order (``refold.render.mechanism.BUILTIN``)."""
CacheProfile = Literal["vllm", "sglang", "openai", "anthropic", "deepseek", "gemini"]
CACHE_PROFILES: tuple[str, ...] = get_args(CacheProfile)
BoundaryRule = Literal["fixed", "cost"]


class PromptConfig(Settings):
    """Where refold's protocol text goes."""

    section: ClassVar[str] = "prompt"

    format_in_system: bool = True
    """Put the PROGRESS/STALE format lines in the system section (off: the agent's own prompt has them)."""
    deferred: bool = True
    """Under the cost rule, send the plain history (no protocol section, no ``[step N]`` labels) until
    hiding pays for the protocol text too and for re-sending the prompt from its start; a session
    in which hiding never pays is sent exactly its history. Not with span or ledger prompts, nor
    when the agent's own prompt has the format lines (it is taught those from the first call)."""
    hide_demos: bool = True
    """With ``deferred``, the protocol's prompt shows a demonstration in the prefix (a worked example
    trajectory, SWE-agent's ``is_demo`` messages) as a one-line note; ``restore demo`` answers with
    it byte-exact. The plain history keeps it, so it is shown until the switch, which the cost rule
    prices as recomputing the prompt from the demonstration on."""
    demo_calls: int = Field(default=1, ge=1, le=1000)
    """With ``hide_demos``, a demonstration is shown at least at this many first calls (the plain
    history is sent until then)."""


class BoundaryConfig(Settings):
    """When the boundary behind which refold condenses moves."""

    section: ClassVar[str] = "boundary"

    rule: BoundaryRule = "cost"
    """``fixed``: the seed's b_t, every k calls. ``cost``: move to b_t only when the tokens it saves
    over the calls still expected pay for the recomputation the move causes."""
    min_remaining: int = Field(default=5, ge=1, le=10_000)
    """The cost rule expects R = max(min_remaining, t) more calls after call t ..."""
    remaining: int | None = Field(default=None, ge=1, le=10_000)
    """... or exactly this many, whatever t is (a fixed horizon)."""
    cache_ttl_s: float | None = Field(default=None, gt=0)
    """Idle seconds after which the provider's cache is cold, so a move is free (None: the profile's)."""
    position: Literal["seed", "window"] = "seed"
    """Where the cost rule may move the boundary: ``seed``, the seed's b_t (never hiding more than
    the fixed rule at the same call); ``window``, at any call the latest position that keeps the
    window the fixed rule keeps right after its moves (b = t - k: the k + ``mask_after`` latest
    outputs visible), an off-grid move priced on the calls until the seed's next move."""
    peak_weight: float | None = Field(default=None, ge=0)
    """The cost rule's price of raising the session's peak prompt (KV memory), per token and call
    of the run; None: the profile's (self-hosted vllm, sglang: a cached token's; hosted APIs: 0)."""
    fold_wait: int = Field(default=2, ge=0, le=100)
    """Under ``cost``, an agent's span fold shows at once only when that pays, else with a boundary
    move, waiting at most this many of the fixed rule's moves (k calls each); 0: at once, as under ``fixed``."""


class Config(Settings):
    """Every refold setting; frozen and validated. ``DEFAULT`` holds the library's defaults."""

    section: ClassVar[str] = "config"

    policy: Policy = Policy()
    spans: SpanPolicy = SpanPolicy()
    ledger: LedgerPolicy = LedgerPolicy()
    prompt: PromptConfig = PromptConfig()
    boundary: BoundaryConfig = BoundaryConfig()
    cache: CacheProfile = "vllm"
    tokenizer: str = "qwen3.6"
    """A tokenizer name (``refold.tokens.TOKENIZER_NAMES`` or an alias), or "off" (no counts)."""
    mechanisms: tuple[str, ...] = MECHANISMS
    """How steps behind the boundary are shaped, in order: built-in names or dotted paths of
    ``refold.render.mechanism.Mechanism`` classes."""

    @field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, name: str) -> str:
        if name != "off" and tokenizer_name(name) is None:
            raise ValueError(f"unknown tokenizer {name!r}; valid choices: {', '.join(TOKENIZER_NAMES)}, off")
        return name

    @classmethod
    def parse(cls, values: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Config:
        """A Config from user input; a policy field (``k``, ``mask_after``) may sit at the top level,
        and ``preset="self-gc"`` starts from a preset (``PRESETS``) that the other values refine."""
        merged = {**(values or {}), **kwargs}
        if "preset" in merged:
            merged = _with_preset(merged)
        raw = merged.pop("policy", None)
        if raw is not None and not isinstance(raw, Mapping | BaseModel):
            raise PolicyError(f"invalid config field 'policy': a mapping of policy fields, not {raw!r:.40}")
        policy = dict(raw or {})
        for key in list(merged):
            if key in Policy.model_fields:
                policy[key] = merged.pop(key)
        if policy:
            merged["policy"] = policy
        try:
            return cls.model_validate(merged)
        except ValidationError as e:
            raise PolicyError(_one_line(e)) from None

    def override(self, assignments: str | Iterable[str]) -> Config:
        """This config with ``a.b=value`` assignments applied (values read as JSON, else as text);
        one assignment may be given as a string."""
        if isinstance(assignments, str):
            assignments = [assignments]
        data = self.model_dump()
        for item in assignments:
            key, sep, raw = item.partition("=")
            if not sep or not key.strip():
                raise PolicyError(f"override '{item}' must look like section.field=value")
            path = key.strip().split(".")
            if len(path) == 1 and path[0] in Policy.model_fields:
                path = ["policy", path[0]]
            node = data
            for part in path[:-1]:
                child = node.get(part)
                if not isinstance(child, dict):
                    raise PolicyError(f"unknown config field '{key.strip()}'; sections: {', '.join(_SECTIONS)}")
                node = child
            node[path[-1]] = _value(raw.strip())
        return Config.parse(data)

    def replace(self, **sections: Any) -> Config:
        """This config with whole fields or sections replaced (``policy=Policy(k=4)``), validated."""
        data = self.model_dump()
        for key, value in sections.items():
            data[key] = value.model_dump() if isinstance(value, BaseModel) else value
        return Config.parse(data)

    @classmethod
    def from_saved(cls, saved: Mapping[str, Any]) -> Config:
        """The config a run saved (``info.config.refold``); defaults for what it lacks.

        Runs saved before ``Config`` existed kept ``format_in_system`` at the top level; runs saved
        before ``prompt.deferred`` sent the protocol from the first call, before
        ``prompt.hide_demos`` showed a demonstration at every call, and before ``boundary.position``
        moved the boundary only to the seed's b_t.
        """
        if not isinstance(saved, Mapping):
            raise PolicyError(f"saved refold config must be a mapping (info.config.refold), got {type(saved).__name__}")
        if {"messages", "trajectory_format", "history", "trajectory"} & saved.keys():  # it gave defaults, silently
            raise PolicyError("saved refold config: this is a whole trajectory; pass its info['config']['refold']")
        data = {k: v for k, v in saved.items() if k in cls.model_fields}
        if "format_in_system" in saved and "prompt" not in data:
            data["prompt"] = {"format_in_system": bool(saved["format_in_system"])}
        if isinstance(data.get("prompt", {}), dict) and "deferred" not in data.get("prompt", {}):
            data["prompt"] = {**data.get("prompt", {}), "deferred": False}  # saved before it: protocol from the start
        if isinstance(data.get("prompt"), dict) and "hide_demos" not in data["prompt"]:
            data["prompt"] = {**data["prompt"], "hide_demos": False}  # saved before it: demonstrations shown
        if isinstance(data.get("boundary", {}), dict) and "position" not in data.get("boundary", {}):
            data["boundary"] = {**data.get("boundary", {}), "position": "seed"}  # saved before it: moves at b_t only
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise PolicyError(f"saved refold config: {_one_line(e)}") from None

    def saved(self) -> dict[str, Any]:
        """What a run stores so that ``from_saved`` rebuilds this config exactly."""
        data = self.model_dump(mode="json")
        data["format_in_system"] = self.prompt.format_in_system  # readable by refold 0.1
        return data


_SECTIONS = tuple(Config.model_fields)

PRESETS: dict[str, dict[str, Any]] = {
    "self-gc": {
        "spans": {"prompt": True, "fold_steps": True},
        "ledger": {"prompt": True, "objects": True, "pin_plans": True, "view": True, "budget_tokens": 128_000},
    },
}
"""Named starting points. ``self-gc`` (seed 002): replies are objects the agent may fold, the latest
plan is pinned, spans may be folded after the fact, and every prompt ends with the ledger view and
carries the budget line (``[context-manager] context: N% of 128k tokens``)."""


def _with_preset(values: Mapping[str, Any]) -> dict[str, Any]:
    rest = dict(values)
    name = rest.pop("preset")
    if name is None:
        return rest
    if name not in PRESETS:
        raise PolicyError(f"unknown preset '{name}'; presets: {', '.join(PRESETS)}")
    out: dict[str, Any] = {k: dict(v) for k, v in PRESETS[name].items()}
    for key, value in rest.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _value(raw: str) -> Any:
    lowered = raw.lower()
    if lowered in ("null", "none", "~"):
        return None
    try:
        return json.loads(lowered if lowered in ("true", "false") else raw)
    except ValueError:
        return raw


def _one_line(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")  # a validator's own words
    if err.get("type") == "extra_forbidden":
        section = _section_of(loc)
        allowed = ", ".join(section) if section else ", ".join(_SECTIONS)
        return f"unknown config field '{loc}'; allowed: {allowed}"
    return f"invalid config field '{loc or 'config'}': {msg}"


def _section_of(loc: str) -> tuple[str, ...]:
    head = loc.split(".")[0] if "." in loc else ""
    model = Config.model_fields.get(head)
    annotation = model.annotation if model else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return tuple(annotation.model_fields)
    return ()


DEFAULT = Config()


def as_config(value: object, where: str) -> Config:
    """``value`` if it is a Config, else a TypeError saying how to make one (a Policy, a dict)."""
    if isinstance(value, Config):
        return value
    hint = (
        "Config(policy=...)" if isinstance(value, Policy)
        else "Config.parse({...})" if isinstance(value, Mapping)
        else "Config() or Config.parse(k=3)"
    )
    raise TypeError(f"{where} takes a refold.Config, got {type(value).__name__}: use {hint}")

_HOSTS = (("anthropic.com", "anthropic"), ("openai.com", "openai"), ("openai.azure.com", "openai"),
          ("deepseek.com", "deepseek"), ("googleapis.com", "gemini"), ("openrouter.ai", "gemini"))


def profile_for_model(model: str) -> str:
    """The cache profile of a litellm model name (``anthropic/claude-...``, ``gpt-5-mini``, ...)."""
    name = model.lower()
    for needle, profile in (("claude", "anthropic"), ("anthropic", "anthropic"), ("gemini", "gemini"),
                            ("deepseek", "deepseek"), ("gpt", "openai"), ("openai/", "openai"), ("o3", "openai"), ("o4", "openai")):
        if needle in name:
            return profile
    return "vllm"


def profile_for(upstream: str) -> str:
    """The cache profile of an upstream URL: a hosted API by its host, else a self-hosted server (vllm)."""
    host = upstream.split("://", 1)[-1].split("/", 1)[0].split("@")[-1].lower()
    return next((name for suffix, name in _HOSTS if host.split(":")[0].endswith(suffix)), "vllm")
