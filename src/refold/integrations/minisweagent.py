"""mini-swe-agent with refold, by configuration only (``model_class`` is a dotted path).

``RefoldModel`` wraps any mini model class. Before each query it renders the agent's full
message list (which mini keeps and saves untouched) through a ``Renderer`` and sends the
rendered prompt instead. Actions that are context commands (restore, begin_span, fold_span,
fold, drop, expand, search_ledger; recognized by ``refold.context``, the same rules as the proxy)
are taken out of ``extra.actions`` so the environment never runs them (the actions as issued and
which were answered stay in ``extra.refold``, ``refold.wire``), and ``format_observation_messages``
answers them from the history, in order, with the config the renderer uses. With ``refold_context_tools`` a
tool-call model is also offered the context commands as function tools (``context_tools``). It composes with every agent class (default, interactive, swebench's) because agents
only talk to the model through ``query`` / ``format_observation_messages``; an environment
wrapper would not work for ``mini-extra swebench``, which picks the image by environment class.

Model config keys (everything else goes to the inner model)::

    model:
      model_class: refold.integrations.minisweagent.RefoldModel
      inner_model_class: litellm        # any mini model class name or dotted path
      refold: {k: 3, dedup: true}       # Policy fields; `enabled: false` sends the full history
      refold_tokenizer: qwen3.6         # counts rendered/base prompt tokens per call; null = off
      refold_commands: {}               # context command name -> handler dotted path (null = off);
                                        # a handler is refold.context.answers.Handler
      refold_spans: {prompt: true}      # SpanPolicy fields (begin_span / fold_span)
      refold_ledger: {prompt: true, budget_tokens: 128000}  # LedgerPolicy fields; budget line
      refold_context_tools: true        # offer the context commands as function tools (tool calls)
      refold_format_in_system: false    # the agent's templates carry {{ refold_response_format }}
      refold_boundary: {rule: cost}     # BoundaryConfig fields (when the boundary moves)
      refold_cache: null                # cache profile the cost rule prices (null: from model_name)
      refold_pins: null                 # a pins file read before every call (refold sessions pin)
      set_cache_control: default_end    # Anthropic breakpoints, placed by refold (mini sets it for claude)

Another ``refold*`` key (a typo such as ``refold_spanz``) is an error when the model is built; it
would reach the inner model, which ignores it. ``inner_model_class`` may be one of mini's
Responses-API classes (``litellm_response``, ...): ``mini_responses`` translates their items.

``refold_format_in_system`` (default: automatic) says whether refold's system section repeats the
PROGRESS/STALE format lines; automatic leaves them out when the task or system prompt has them.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from minisweagent.exceptions import FormatError
from minisweagent.models import get_model_class
from minisweagent.utils.serialize import recursive_merge

from ..config import BoundaryConfig, Config, PromptConfig, profile_for_model
from ..context.answers import Answerer, Request, refused
from ..context.recognize import Recognizer, from_tool_call
from ..context.tools import offer
from ..errors import PolicyError
from ..formats.mini import PINS
from ..formats.mini_responses import answer_item, is_responses_class, to_chat, to_items
from ..history import CHAT_ROLES, History
from ..mechanisms.ledger import LedgerPolicy
from ..mechanisms.spans import SpanPolicy
from ..messages import clean
from ..policy import Policy
from ..prompts import response_format_lines, system_section
from ..protocol import CM, COMMAND_NAMES
from ..render import Renderer
from ..render.received import fixed_cadence
from ..tokens import TOKENIZER_NAMES, Tokenizer, tokenizer_name
from ..types import Action, Message, Rendered, content_text
from ..wire import action as make_action
from ..wire import actions_record, read_actions
from .cache_control import place_cache_control
from .context_tools import with_context_tools
from .mini_options import check_keys, flag, mapping, parse_section, resolve_handlers, text, usage_errors
from .mini_record import FORMAT, PinFile, answer_message, call_info, extends, usage

logger = logging.getLogger("refold")
REFOLD_KEYS = (
    "refold",
    "refold_tokenizer",
    "refold_commands",
    "refold_spans",
    "refold_ledger",
    "refold_context_tools",
    "refold_format_in_system",
    "refold_boundary",
    "refold_cache",
    "refold_pins",
)
"""The model config keys RefoldModel reads (``inner_model_class`` and ``set_cache_control`` too)."""

class RefoldModel:
    """A mini Model that sends refold's rendering of the history to an inner model."""

    @usage_errors
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
        refold_boundary: Mapping[str, Any] | None = None,
        refold_cache: str | None = None,
        set_cache_control: str | None = None,
        refold_pins: str | None = None,
        **kwargs: Any,
    ) -> None:
        check_keys(kwargs, REFOLD_KEYS)
        options = mapping("refold", refold)
        self.enabled = flag("refold.enabled", options.pop("enabled", True))
        refold_tokenizer = text("refold_tokenizer", refold_tokenizer)
        if refold_tokenizer and tokenizer_name(refold_tokenizer) is None:  # said before the run starts
            raise PolicyError(
                f"refold_tokenizer: unknown tokenizer {refold_tokenizer!r}; valid choices: {', '.join(TOKENIZER_NAMES)}"
            )
        refold_pins = text("refold_pins", refold_pins)
        refold_cache = text("refold_cache", refold_cache)
        policy = Policy.parse(**options)
        spans = parse_section(SpanPolicy, "refold_spans", refold_spans)
        ledger = parse_section(LedgerPolicy, "refold_ledger", refold_ledger)
        self.format_in_system = refold_format_in_system
        cache = refold_cache or profile_for_model(str(kwargs.get("model_name", "")))
        boundary = parse_section(BoundaryConfig, "refold_boundary", refold_boundary)
        try:
            self.refold_config = Config(policy=policy, spans=spans, ledger=ledger).replace(
                boundary=boundary, cache=cache
            )
        except PolicyError as e:  # the only field given here that can be invalid: the cache profile
            raise PolicyError(f"refold_cache: {str(e).split(': ', 1)[-1]}") from None
        if set_cache_control not in (None, "default_end"):
            raise PolicyError(f"set_cache_control must be 'default_end' or null, not {set_cache_control!r}")
        self.cache_control = set_cache_control is not None
        self.handlers, off = resolve_handlers(refold_commands)
        if not self.enabled:
            off = frozenset(COMMAND_NAMES)
        # mini reads each command whole before it runs: ``ls; restore 3`` is answered "Not run"
        schemas, rec = offer(
            self.refold_config, [{"function": {"name": "bash"}}], switched_off=off, text=True, compound=True
        )
        self.tokenizer_name = refold_tokenizer
        self._tokenizer: Tokenizer | None = None
        try:
            inner_class = get_model_class(str(kwargs.get("model_name", "")), inner_model_class)
        except ValueError as e:
            raise PolicyError(str(e)) from None
        if inner_class is RefoldModel:
            raise PolicyError("inner_model_class must name the model to wrap, not RefoldModel itself")
        self.inner_model_class = f"{inner_class.__module__}.{inner_class.__name__}"
        self.responses = is_responses_class(inner_class)  # a run of Responses items, not chat messages
        self.cache_control = self.cache_control and not self.responses  # breakpoints are chat content parts
        self.context_tools = False
        if flag("refold_context_tools", refold_context_tools) and self.enabled:
            offering = with_context_tools(inner_class, schemas)
            if offering is None and self.responses:
                logger.info("refold_context_tools: %s uses the Responses API; the agent issues context "
                            "commands through the bash tool", self.inner_model_class)
            elif offering is None:
                logger.warning(
                    "refold_context_tools: %s is not a litellm tool-call model; the agent can still "
                    "issue context commands through the bash tool",
                    self.inner_model_class,
                )
            else:
                inner_class, self.context_tools = offering, True
        self.recognizer = rec if self.context_tools else Recognizer(frozenset(), rec.shell, True, True, True)
        self.inner = inner_class(**kwargs)
        self._history: History | None = None
        self._renderer = self._new_renderer(None)
        # the user's pins (refold sessions pin), read before each call; saved absolute in the run
        self.pins_file = str(Path(refold_pins).expanduser().resolve()) if refold_pins else None
        self._pins = PinFile(refold_pins)

    @property
    def policy(self) -> Policy:
        return self.refold_config.policy

    @property
    def spans(self) -> SpanPolicy:
        return self.refold_config.spans

    @property
    def ledger(self) -> LedgerPolicy:
        return self.refold_config.ledger

    # ---- the Model protocol ---------------------------------------------------------------

    @property
    def config(self) -> Any:
        return self.inner.config  # mini reads e.g. model.config.model_name

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        run = to_chat(messages) if self.responses else messages
        history = self._sync(run)
        if self._pins.changed(history):
            history = self._sync(run, rebuild=True)
        chat = [m for m in run if m.get("role") in CHAT_ROLES]
        rendered: Rendered | None = None
        if self.enabled:
            rendered = self._renderer.render(history)
            sent = place_cache_control(rendered) if self.cache_control else copy.deepcopy(rendered.messages)
        else:
            sent = [clean(m) for m in chat]
        info = call_info(history, rendered, sent, chat, self._get_tokenizer(), self.cache_control)
        inner_sent: list[dict[str, Any]] = sent
        if self.responses:  # the same prompt as the Responses items the inner model sends
            inner_sent = to_items(sent, rendered.origins, history) if rendered is not None else list(messages)
        try:
            reply = self.inner.query(inner_sent, **kwargs)
        except FormatError as e:
            # mini saves e.messages; keep what this (billed) call was sent next to the error
            if e.messages and isinstance(e.messages[0], dict):
                first = e.messages[0]
                extra = first.setdefault("extra", {})
                extra["refold"] = info | usage(extra.get("response"))
            raise
        reply = dict(reply)
        extra = dict(reply.get("extra") or {})
        info |= usage(reply if self.responses else extra.get("response"))
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
        if not info.get("context_actions"):
            out: list[dict[str, Any]] = self.inner.format_observation_messages(
                message, outputs, template_vars
            )
            return out
        history = self._history if self._history is not None else History([])
        answerer = Answerer(history, self.refold_config)  # one reply's commands, in order
        pending = list(outputs)
        results: list[dict[str, Any]] = []
        issued = info["actions"]
        for i, act in enumerate(read_actions(message)):
            if act.context is not None:
                answered = self._answer(act, answerer)
                results.append(answer_item(answered) if self.responses else answered)
                continue
            # one env action at a time, so the inner model formats it exactly as it would alone
            single = {**message, "extra": {**message["extra"], "actions": [issued[i]]}}
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
                    chunk=fixed_cadence(self._renderer.config),
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
                            "prompt": self._renderer.config.prompt.model_dump(mode="json"),
                            "format_in_system": self._renderer.config.prompt.format_in_system,  # refold 0.1 reads it
                            "inner_model_type": self.inner_model_class,
                            "tokenizer": self.tokenizer_name,
                            "cache_control": self.cache_control,
                            "commands": sorted(self.recognizer.shell),
                            "pins_file": self.pins_file,
                        },
                    },
                    PINS: list(self._pins.records),
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

    def _sync(self, messages: Sequence[Message], *, rebuild: bool = False) -> History:
        """Bring the history up to ``messages``; rebuild when mini added a non-step message.

        mini appends format errors and interruptions as user messages after a step that was
        already recorded; History is append-only, so such a tail (or a new run) means a rebuild.
        """
        chat = [m for m in messages if m.get("role") in CHAT_ROLES]
        h = self._history
        if h is not None and not rebuild and extends(h, chat):
            try:
                h.extend_from_messages(chat)
                return h
            except ValueError:
                pass
        h = History.from_messages(chat, source="mini-swe-agent")
        h.load_pins(self._pins.records)
        self._history = h
        self._renderer = self._new_renderer(h)  # maybe a new run: its prefix decides format_in_system again
        return h

    def _new_renderer(self, history: History | None) -> Renderer:
        in_system = self.format_in_system
        if in_system is None:  # automatic: only when the agent's own prompt lacks the format lines
            lines = response_format_lines(self.policy.k)
            prefix = history.prefix if history is not None else ()
            in_system = not any(lines in content_text(m.get("content")) for m in prefix)
        return Renderer(self.refold_config.replace(prompt=PromptConfig(format_in_system=in_system)))

    def _get_tokenizer(self) -> Tokenizer | None:
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
        typed: list[Action] = []
        for a in actions:
            a = a if isinstance(a, dict) else {}
            tool, command = str(a.get("tool") or "bash"), str(a.get("command", ""))
            call_id = a.get("tool_call_id")
            cmd = self.recognizer.command(tool, command)
            if cmd is None and tool in COMMAND_NAMES:  # a context tool call never reaches the shell
                cmd = from_tool_call(tool, command)
            typed.append(make_action(command, tool, str(call_id) if call_id is not None else None, cmd))
        if any(a.context is not None for a in typed):
            info |= actions_record(typed)
            info["actions"] = actions  # the full list, in order, as the model issued it
            extra["actions"] = [a for a, t in zip(actions, typed, strict=True) if t.context is None]

    def _answer(self, act: Action, answerer: Answerer) -> dict[str, Any]:
        cmd = act.context
        assert cmd is not None
        name = cmd.name
        handler = self.handlers.get(name)
        try:
            if name not in self.recognizer.shell:
                answer = refused(name, f"{CM} {name} is switched off in this run.")
            elif handler is not None:
                answer = handler(cmd, Request(answerer.history, self.refold_config, answerer.t + 1))
            else:
                answer = answerer.answer(cmd)
        except PolicyError as e:
            answer = refused(name, f"{CM} {name}: {e}")
        return answer_message(name, answer, act.tool_call_id)
