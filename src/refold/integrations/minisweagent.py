"""mini-swe-agent with refold, by configuration only (``model_class`` is a dotted path).

``RefoldModel`` wraps any mini model class. Before each query it renders the agent's full
message list (which mini keeps and saves untouched) through a ``Renderer`` and sends the
rendered prompt instead. Actions that are context commands (restore, begin_span, fold_span,
fold, drop, expand, search_ledger; handlers in ``refold.integrations.commands``) are taken out of
``extra.actions`` so the environment never runs them (the actions as issued stay in
``extra.refold.actions``), and ``format_observation_messages`` answers them from the history
with the same span and ledger policies the renderer uses. With ``refold_context_tools`` a
tool-call model is also offered the context commands as function tools (``context_tools``). It composes with every agent class (default, interactive, swebench's) because agents
only talk to the model through ``query`` / ``format_observation_messages``; an environment
wrapper would not work for ``mini-extra swebench``, which picks the image by environment class.

Model config keys (everything else goes to the inner model)::

    model:
      model_class: refold.integrations.minisweagent.RefoldModel
      inner_model_class: litellm        # any mini model class name or dotted path
      refold: {k: 3, dedup: true}       # Policy fields; `enabled: false` sends the full history
      refold_tokenizer: qwen3.6         # counts rendered/base prompt tokens per call; null = off
      refold_commands: {}               # context command name -> handler dotted path (null = off)
      refold_spans: {prompt: true}      # SpanPolicy fields (begin_span / fold_span)
      refold_ledger: {prompt: true, budget_tokens: 128000}  # LedgerPolicy fields; budget line
      refold_context_tools: true        # offer the context commands as function tools (tool calls)
      refold_format_in_system: false    # the agent's templates carry {{ refold_response_format }}
      set_cache_control: default_end    # Anthropic breakpoints, placed by refold (mini sets it for claude)

``refold_format_in_system`` (default: automatic) says whether refold's system section repeats the
PROGRESS/STALE format lines; automatic leaves them out when the task or system prompt has them.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from minisweagent.exceptions import FormatError
from minisweagent.models import get_model_class
from minisweagent.utils.serialize import recursive_merge
from pydantic import BaseModel, ValidationError

from ..config import Config, PromptConfig
from ..errors import PolicyError
from ..history import CHAT_ROLES, History
from ..mechanisms.ledger import LedgerPolicy
from ..mechanisms.spans import SpanPolicy
from ..messages import clean
from ..policy import Policy
from ..protocol import CM, ContextCommand, response_format_lines, system_section
from ..render import Renderer
from ..types import Message, Rendered, content_text
from .cache_control import breakpoints, place_cache_control
from .commands import CommandContext, CommandResult, Handler, match, resolve_handlers
from .context_tools import with_context_tools

logger = logging.getLogger("refold")
_M = TypeVar("_M", bound=BaseModel)

FORMAT = "refold-mini-1"
"""Version of the ``extra.refold`` record added to each assistant message."""


class RefoldModel:
    """A mini Model that sends refold's rendering of the history to an inner model."""

    def __init__(
        self,
        *,
        inner_model_class: str = "",
        refold: Mapping[str, Any] | None = None,
        refold_tokenizer: str | None = "qwen3.6",
        refold_commands: Mapping[str, str | None] | None = None,
        refold_spans: Mapping[str, Any] | None = None,
        refold_ledger: Mapping[str, Any] | None = None,
        refold_context_tools: bool = False,
        refold_format_in_system: bool | None = None,
        set_cache_control: str | None = None,
        **kwargs: Any,
    ) -> None:
        options = dict(refold or {})
        self.enabled = bool(options.pop("enabled", True))
        self.policy = Policy.parse(**options)
        self.spans = _parse(SpanPolicy, "refold_spans", refold_spans)
        self.ledger = _parse(LedgerPolicy, "refold_ledger", refold_ledger)
        self.format_in_system = refold_format_in_system
        self.refold_config = Config(policy=self.policy, spans=self.spans, ledger=self.ledger)
        if set_cache_control not in (None, "default_end"):
            raise PolicyError(f"set_cache_control must be 'default_end' or null, not {set_cache_control!r}")
        self.cache_control = set_cache_control is not None
        self.handlers: dict[str, Handler] = resolve_handlers(refold_commands) if self.enabled else {}
        self.tokenizer_name = refold_tokenizer
        self._tokenizer: Any = None
        try:
            inner_class = get_model_class(str(kwargs.get("model_name", "")), inner_model_class)
        except ValueError as e:
            raise PolicyError(str(e)) from None
        if inner_class is RefoldModel:
            raise PolicyError("inner_model_class must name the model to wrap, not RefoldModel itself")
        self.inner_model_class = f"{inner_class.__module__}.{inner_class.__name__}"
        self.context_tools = False
        if refold_context_tools and self.enabled:
            offering = with_context_tools(inner_class)
            if offering is None:
                logger.warning(
                    "refold_context_tools: %s is not a litellm tool-call model; the agent can still "
                    "issue context commands through the bash tool",
                    self.inner_model_class,
                )
            else:
                inner_class, self.context_tools = offering, True
        self.inner = inner_class(**kwargs)
        self._history: History | None = None
        self._renderer = self._new_renderer(None)

    # ---- the Model protocol ---------------------------------------------------------------

    @property
    def config(self) -> Any:
        return self.inner.config  # mini reads e.g. model.config.model_name

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        history = self._sync(messages)
        chat = [m for m in messages if m.get("role") in CHAT_ROLES]
        rendered: Rendered | None = None
        if self.enabled:
            rendered = self._renderer.render(history)
            sent = place_cache_control(rendered) if self.cache_control else copy.deepcopy(rendered.messages)
        else:
            sent = [clean(m) for m in chat]
        info = self._call_info(history, rendered, sent, chat)
        try:
            reply = self.inner.query(sent, **kwargs)
        except FormatError as e:
            # mini saves e.messages; keep what this (billed) call was sent next to the error
            if e.messages and isinstance(e.messages[0], dict):
                first = e.messages[0]
                extra = first.setdefault("extra", {})
                extra["refold"] = info | _usage(extra.get("response"))
            raise
        reply = dict(reply)
        extra = dict(reply.get("extra") or {})
        info |= _usage(extra.get("response"))
        self._intercept(extra, info)
        extra["refold"] = info
        reply["extra"] = extra
        return reply

    def format_message(self, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = self.inner.format_message(**kwargs)
        return out

    def format_observation_messages(
        self,
        message: dict[str, Any],
        outputs: list[dict[str, Any]],
        template_vars: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        info = (message.get("extra") or {}).get("refold") or {}
        context = {c["index"]: c for c in info.get("context_actions") or []}
        if not context:
            out: list[dict[str, Any]] = self.inner.format_observation_messages(
                message, outputs, template_vars
            )
            return out
        pending = list(outputs)
        results: list[dict[str, Any]] = []
        for i, action in enumerate(info["actions"]):
            if i in context:
                results.append(self._answer(action, context[i]))
                continue
            # one env action at a time, so the inner model formats it exactly as it would alone
            single = {**message, "extra": {**message["extra"], "actions": [action]}}
            results.extend(self.inner.format_observation_messages(single, pending[:1], template_vars))
            pending = pending[1:]
        return results

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        k = self.policy.k
        return recursive_merge(
            self.inner.get_template_vars(**kwargs),
            {
                "refold_enabled": self.enabled,
                "refold_k": k,
                "refold_response_format": response_format_lines(k) if self.enabled else "",
                "refold_system_section": system_section(
                    k,
                    reversible=self.policy.reversible,
                    include_format=self.format_in_system is not False,
                    masking=self.policy.mask_after is not None,
                    chunk=self.policy.chunk,
                )
                if self.enabled
                else "",
            },
        )

    def serialize(self) -> dict[str, Any]:
        return recursive_merge(
            self.inner.serialize(),
            {
                "info": {
                    "config": {
                        "model_type": f"{type(self).__module__}.{type(self).__name__}",
                        "refold": {
                            "format": FORMAT,
                            "enabled": self.enabled,
                            "policy": self.policy.model_dump(mode="json"),
                            "spans": self.spans.model_dump(mode="json"),
                            "ledger": self.ledger.model_dump(mode="json"),
                            "boundary": self.refold_config.boundary.model_dump(mode="json"),
                            "cache": self.refold_config.cache,
                            "context_tools": self.context_tools,
                            "format_in_system": self._renderer.config.prompt.format_in_system,
                            "inner_model_type": self.inner_model_class,
                            "tokenizer": self.tokenizer_name,
                            "cache_control": self.cache_control,
                            "commands": sorted(self.handlers),
                        },
                    }
                }
            },
        )

    def __getattr__(self, name: str) -> Any:
        # anything else an agent or run script reads (cost fields, helpers) is the inner model's
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # ---- internals ------------------------------------------------------------------------

    @property
    def history(self) -> History | None:
        """The history as of the last query (read-only view for tests and tools)."""
        return self._history

    def _sync(self, messages: Sequence[Message]) -> History:
        """Bring the history up to ``messages``; rebuild when mini added a non-step message.

        mini appends format errors and interruptions as user messages after a step that was
        already recorded; History is append-only, so such a tail (or a new run) means a rebuild.
        """
        chat = [m for m in messages if m.get("role") in CHAT_ROLES]
        h = self._history
        if h is not None and _extends(h, chat):
            try:
                h.extend_from_messages(chat)
                return h
            except ValueError:
                pass
        h = History.from_messages(chat, source="mini-swe-agent")
        self._history = h
        self._renderer = self._new_renderer(h)  # a fresh cache: the old one is keyed by id(history)
        return h

    def _new_renderer(self, history: History | None) -> Renderer:
        in_system = self.format_in_system
        if in_system is None:  # automatic: only when the agent's own prompt lacks the format lines
            lines = response_format_lines(self.policy.k)
            prefix = history.prefix if history is not None else ()
            in_system = not any(lines in content_text(m.get("content")) for m in prefix)
        return Renderer(self.refold_config.replace(prompt=PromptConfig(format_in_system=in_system)))

    def _call_info(
        self, history: History, rendered: Rendered | None, sent: list[Message], chat: list[Message]
    ) -> dict[str, Any]:
        info: dict[str, Any] = {
            "format": FORMAT,
            "t": len(history),
            "messages": len(sent),
            "base_messages": len(chat),
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
            if self.cache_control:
                info["cache_breakpoints"] = breakpoints(rendered)
        tok = self._get_tokenizer()
        if tok is not None:
            from ..tokens import count_messages

            info["tokenizer"] = tok.name
            info["prompt_tokens"] = count_messages([clean(m) for m in sent], tok)
            info["base_prompt_tokens"] = count_messages([clean(m) for m in chat], tok)
        return info

    def _get_tokenizer(self) -> Any:
        if self.tokenizer_name and self._tokenizer is None:
            from ..tokens import get_tokenizer

            try:
                self._tokenizer = get_tokenizer(self.tokenizer_name)
            except ValueError as e:
                raise PolicyError(f"refold_tokenizer: {e}") from None
        return self._tokenizer

    def _intercept(self, extra: dict[str, Any], info: dict[str, Any]) -> None:
        """Take context commands out of the actions the agent will hand to the environment."""
        actions = extra.get("actions")
        if not isinstance(actions, list):
            return
        context = []
        for i, action in enumerate(actions):
            if not isinstance(action, dict):
                continue
            tool = str(action.get("tool") or "bash")
            parsed = match(str(action.get("command", "")), self.handlers, tool)
            if parsed is None and tool != "bash":  # a context tool call never reaches the shell
                parsed = ContextCommand(tool, "")
            if parsed is not None:
                context.append({"index": i, "name": parsed.name, "argument": parsed.argument})
        if context:
            info["actions"] = actions  # the full list, in order, as the model issued it
            info["context_actions"] = context
            skip = {c["index"] for c in context}
            extra["actions"] = [a for i, a in enumerate(actions) if i not in skip]

    def _answer(self, action: dict[str, Any], command: dict[str, Any]) -> dict[str, Any]:
        history = self._history if self._history is not None else History([])
        name = command["name"]
        ctx = CommandContext(history, self.policy, len(history) + 1, self.spans, self.ledger)
        handler = self.handlers.get(name)
        try:
            if handler is None:
                result = CommandResult(f"{CM} {name} is switched off in this run.", {"refold_error": True})
            else:
                result = handler(ContextCommand(name, command["argument"]), ctx)
        except PolicyError as e:
            result = CommandResult(f"{CM} {name}: {e}", {"refold_error": True})
        msg: dict[str, Any] = {
            "role": "user",
            "content": result.text,
            "extra": {
                "raw_output": result.text,
                "returncode": 0,
                "timestamp": time.time(),
                "exception_info": "",
                "refold_command": name,
                **result.extra,
            },
        }
        if action.get("tool_call_id"):
            msg["role"] = "tool"
            msg["tool_call_id"] = action["tool_call_id"]
        return msg


def _parse(cls: type[_M], key: str, values: Mapping[str, Any] | None) -> _M:
    """A SpanPolicy / LedgerPolicy from config, or a one-line PolicyError naming the bad field."""
    try:
        return cls.model_validate(dict(values or {}))
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ()))
        raise PolicyError(f"invalid {key} field '{field}': {err.get('msg')}") from None


def _extends(history: History, chat: Sequence[Message]) -> bool:
    """Whether ``chat`` can be the same run as ``history`` (same prefix, not shorter)."""
    prefix = history.prefix
    known = len(prefix) + sum(1 + len(s.observations) for s in history.steps)
    return len(chat) >= known and all(a == b for a, b in zip(prefix, chat, strict=False))


def _usage(response: Any) -> dict[str, Any]:
    """The provider's own prompt/cached token counts, when the inner model recorded a response."""
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return {}
    out: dict[str, Any] = {}
    if isinstance(usage.get("prompt_tokens"), int):
        out["provider_prompt_tokens"] = usage["prompt_tokens"]
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = usage.get("cache_read_input_tokens")  # Anthropic's name, when litellm passes it on
    if isinstance(cached, int):
        out["provider_cached_tokens"] = cached
    if isinstance(usage.get("cache_creation_input_tokens"), int):
        out["provider_cache_write_tokens"] = usage["cache_creation_input_tokens"]
    return out
