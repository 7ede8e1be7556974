"""Context commands: recognized in an agent's replies, answered from the history, offered as tools.

* ``refold.context.recognize``: which actions are context commands (``Recognizer``), one set of
  rules for mini, the proxy and recorded runs;
* ``refold.context.tools``: ``TOOL_SCHEMAS`` and ``offer`` (which of them a request gets);
* ``refold.context.answers``: ``Answerer`` (the commands of one reply, in order) and ``answer``;
* ``refold.context.search``: ``search_ledger`` and the ledger view.

This package imports only the recognizer and the tools: ``refold.history`` reads step facts
through the recognizer, and the answers need the history, so they are imported from their module.
"""

from __future__ import annotations

from .recognize import ANY, Recognizer, from_shell, from_tool_call
from .tools import TOOL_SCHEMAS, answered, offer

__all__ = ["ANY", "TOOL_SCHEMAS", "Recognizer", "answered", "from_shell", "from_tool_call", "offer"]
