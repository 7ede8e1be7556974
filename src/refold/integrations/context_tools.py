"""Offer the context commands as function tools next to mini's ``bash`` tool (tool-call mode).

mini's ``LitellmModel`` sends exactly one tool (``bash``) and refuses a call of any other tool as
a format error. ``with_context_tools(cls)`` returns a subclass of such a model class that sends
``[BASH_TOOL, *schemas]`` (``refold.context.tools.offer``) and turns a call of a context tool into an action
``{"command": <JSON arguments>, "tool_call_id": ..., "tool": <name>}``; ``RefoldModel`` takes
those out of the actions before the environment sees them and answers them from the history.
Every other tool call is parsed by mini's own ``parse_toolcall_actions`` (same errors as before).

Chat-completions tool-call classes that keep LitellmModel's ``_query``/``_parse_actions`` are
supported, and LitellmResponseModel (Responses API: flat tool schemas, ``function_call`` items)
likewise; for any other class ``with_context_tools`` returns None and the agent issues
context commands through the bash tool instead (``fold_span "..."``), which works everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..protocol import COMMAND_NAMES

_RESPONSES = ("minisweagent.models.litellm_response_model", "LitellmResponseModel")


def with_context_tools(cls: type, schemas: Sequence[dict[str, Any]]) -> type | None:
    """A subclass of mini model class ``cls`` offering ``schemas`` next to bash, or None if unsupported."""
    if any((c.__module__, c.__qualname__) == _RESPONSES for c in getattr(cls, "__mro__", ())):
        return _with_response_tools(cls, schemas)
    # a class not derived from LitellmModel is unsupported: said from its bases' names, without
    # importing litellm (~6 s of CPU) for a model that never uses it (mini's test models, say)
    if not any(
        (c.__module__, c.__qualname__) == ("minisweagent.models.litellm_model", "LitellmModel")
        for c in getattr(cls, "__mro__", ())
    ):
        return None
    try:
        from minisweagent.models.litellm_model import LitellmModel
    except ImportError:  # pragma: no cover - mini is installed whenever this module is used
        return None
    if not (
        isinstance(cls, type)
        and issubclass(cls, LitellmModel)
        and cls._query is LitellmModel._query
        and cls._parse_actions is LitellmModel._parse_actions
    ):
        return None
    sub = type(cls.__name__, (cls,), {"_query": _query, "_parse_actions": _parse_actions, "_refold_tools": list(schemas)})
    sub.__module__, sub.__qualname__ = cls.__module__, cls.__qualname__  # mini's model_type stays the same
    return sub


def _query(self: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    """LitellmModel._query with the context tools added to ``bash``."""
    import litellm
    from minisweagent.models.utils.actions_toolcall import BASH_TOOL

    try:
        return litellm.completion(
            model=self.config.model_name,
            messages=messages,
            tools=[BASH_TOOL, *self._refold_tools],
            **(self.config.model_kwargs | kwargs),
        )
    except litellm.exceptions.AuthenticationError as e:
        e.message += " You can permanently set your API key with `mini-extra config set KEY VALUE`."
        raise e


def _parse_actions(self: Any, response: Any) -> list[dict[str, Any]]:
    """Context tool calls become actions naming their tool; the rest are parsed as mini does."""
    from minisweagent.models.litellm_model import LitellmModel
    from minisweagent.models.utils.actions_toolcall import parse_toolcall_actions

    return _split(
        list(response.choices[0].message.tool_calls or []),
        lambda c: c.function.name,
        lambda c: {"command": c.function.arguments or "", "tool_call_id": c.id, "tool": c.function.name},
        lambda bash: parse_toolcall_actions(
            bash,
            format_error_template=self.config.format_error_template,
            template_kwargs={"finish_reason": response.choices[0].finish_reason},
        ),
        lambda: LitellmModel._parse_actions(self, response),
    )


def _split(
    calls: list[Any],
    name: Callable[[Any], Any],
    context: Callable[[Any], dict[str, Any]],
    parse: Callable[[list[Any]], list[dict[str, Any]]],
    whole: Callable[[], list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """The actions of a reply's ``calls`` in order: a call of a context command (``name`` of it in
    ``COMMAND_NAMES``) as ``context`` reads it, the others parsed together by mini's ``parse`` (its
    errors as before); ``whole``: mini's own parsing, when no call is a context command."""
    if not any(name(c) in COMMAND_NAMES for c in calls):
        return whole()
    bash = [c for c in calls if name(c) not in COMMAND_NAMES]
    parsed = iter(parse(bash) if bash else [])
    return [context(c) if name(c) in COMMAND_NAMES else next(parsed) for c in calls]


# ---- the Responses API (LitellmResponseModel): flat tool schemas, function_call output items -------------


def _with_response_tools(cls: type, schemas: Sequence[dict[str, Any]]) -> type | None:
    from minisweagent.models.litellm_response_model import LitellmResponseModel

    if not (
        getattr(cls, "_query", None) is LitellmResponseModel._query
        and getattr(cls, "_parse_actions", None) is LitellmResponseModel._parse_actions
    ):
        return None
    flat = [{"type": "function", **s["function"]} for s in schemas]  # the Responses API has no "function" key
    sub = type(cls.__name__, (cls,), {"_query": _response_query, "_parse_actions": _response_actions, "_refold_tools": flat})
    sub.__module__, sub.__qualname__ = cls.__module__, cls.__qualname__
    return sub


def _response_query(self: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    """LitellmResponseModel._query with the context tools added to ``bash``."""
    import litellm
    from minisweagent.models.utils.actions_toolcall_response import BASH_TOOL_RESPONSE_API

    try:
        return litellm.responses(
            model=self.config.model_name,
            input=messages,
            tools=[BASH_TOOL_RESPONSE_API, *self._refold_tools],
            **(self.config.model_kwargs | kwargs),
        )
    except litellm.exceptions.AuthenticationError as e:
        e.message += " You can permanently set your API key with `mini-extra config set KEY VALUE`."
        raise e


def _response_actions(self: Any, response: Any) -> list[dict[str, Any]]:
    """Context function calls become actions naming their tool; the rest are parsed as mini does."""
    from minisweagent.models.litellm_response_model import LitellmResponseModel
    from minisweagent.models.utils.actions_toolcall_response import (
        finish_reason_from_responses_api,
        parse_toolcall_actions_response,
    )

    def get(item: Any, key: str) -> Any:
        return item.get(key) if isinstance(item, dict) else getattr(item, key, None)

    return _split(
        [i for i in getattr(response, "output", None) or [] if get(i, "type") == "function_call"],
        lambda c: get(c, "name"),
        lambda c: {"command": get(c, "arguments") or "", "tool_call_id": get(c, "call_id") or get(c, "id"),
                   "tool": get(c, "name")},
        lambda bash: parse_toolcall_actions_response(
            bash,
            format_error_template=self.config.format_error_template,
            template_kwargs={"finish_reason": finish_reason_from_responses_api(response)},
        ),
        lambda: LitellmResponseModel._parse_actions(self, response),
    )
