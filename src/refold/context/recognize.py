"""Which actions are context commands: one set of rules for mini, the proxy and recorded runs.

A context command is issued either as a call of one of the function tools refold offers
(``fold_span`` with ``{"conclusion": ...}``) or as a shell command (``fold_span "..."``, through
a shell tool or a reply's ```bash block). Coreutils ``fold -w 80 f`` and ``expand -t 4 f`` are
shell commands: their arguments are not output or span ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..mechanisms.ledger import parse_ids
from ..mechanisms.spans import parse_span_id
from ..protocol import COMMAND_NAMES, ContextCommand
from ..protocol import parse_command as parse_line
from ..shell_lex import Simple, lex

SPAN_COMMANDS = frozenset({"begin_span", "fold_span", "fold_steps"})
LEDGER_COMMANDS = frozenset({"fold", "drop", "search_ledger", "pin", "unpin"})
ALWAYS = frozenset({"restore", "expand"})  # a non-reversible policy answers that nothing comes back


def from_shell(command: str, *, compound: bool = False) -> ContextCommand | None:
    """The context command a shell command is, or None to run it; ``compound``: also a restore
    after another command (``Recognizer.compound``)."""
    cmd = parse_line(command)
    if cmd is None:
        return _after_another(command) if compound and "restore" in command else None
    if cmd.name in ("fold", "drop", "pin", "unpin") and not parse_ids(cmd.argument):
        return None
    if cmd.name == "expand" and not parse_ids(cmd.argument) and parse_span_id(cmd.argument) is None:
        return None
    return cmd


def parse_command(command: str) -> ContextCommand | None:
    """``refold.parse_command``: the context command a shell command the agent issued is, read as
    mini, the proxy and replays read it; None: run it (``fold -w 80 f`` is coreutils' fold, while
    ``protocol.parse_command``, the line's syntax alone, calls it a ledger fold; ``ls; restore 3``
    is a restore after another command, answered "Not run")."""
    return from_shell(command, compound=True)


def _after_another(command: str) -> ContextCommand | None:
    """``ls; restore 3`` (a restore after a command that is not ``cd DIR``, or inside ``for ...;
    do restore 3; done`` / ``if ...; then restore 3; fi``): answered as ``restore 3 && ls`` is,
    "Not run" naming both parts (``parse_restore_args``), never sent to a shell that would say
    ``restore: command not found``. A ``restore`` quoted, in a heredoc or as another program's
    argument (``git restore f``) is no command of its own."""
    simples = [s for s in lex(command) if s.words]
    found = _restore_at(simples)
    if found is None:
        return None
    k, j = found
    s = simples[k]
    # inside a loop or an if the restore's place stays marked: 'for f in a; done' (its 'do' cut
    # away with it) was named as the rest to run, which no shell reads
    kept = [" ".join([*s.raw[:j], "\u2026"])] if j else []
    others = "; ".join([*(" ".join(o.raw) for o in simples[:k]), *kept, *(" ".join(o.raw) for o in simples[k + 1 :])])
    return ContextCommand("restore", " ".join(s.raw[j + 1 :]) + (f"; {others}" if others else ""))


_KEYWORDS = frozenset({"do", "then", "else", "elif", "if", "while", "until", "!", "time"})
"""Words a command may follow within one simple command as ``shell_lex`` splits them."""
_OPENS = frozenset({"if", "for", "while", "until", "case", "select"})
_CLOSES = frozenset({"fi", "done", "esac"})


def _restore_at(simples: list[Simple]) -> tuple[int, int] | None:
    """(which simple command, which of its words) is a restore after another command."""
    for k, s in enumerate(simples):
        j = 0
        while j < len(s.words) - 1 and s.raw[j] in _KEYWORDS:
            j += 1
        if (k or j) and s.words[j] == "restore" and s.raw[j] == "restore":
            return k, j
    return None


def split_restore(command: str) -> tuple[str, str] | None:
    """``ls; restore 3`` as (``ls``, ``restore 3``): the commands before the first restore after
    another command (``_after_another``) as a whole command line, and the text from that restore
    on; None when there is none, or no clean cut before it (inside a loop, an ``if``, a group or
    a function body, or with a heredoc body still to come). A streamed call whose first part the client already has
    is split there (``proxy.compound``)."""
    simples = [s for s in lex(command) if s.words]
    found = _restore_at(simples)
    if found is None or found[1] or not simples[found[0]].clean:
        return None
    k = found[0]
    depth = 0  # compound commands open before it: cutting there leaves one unclosed
    for s in simples[:k]:
        first = next((w for w in s.raw if w not in ("!", "time")), "")
        depth += (first in _OPENS) - (first in _CLOSES)
    if depth > 0:
        return None
    s = simples[k]
    if any(c in "({" for c in command[s.cut : s.start]):  # ``ls; (restore 3)``, ``f() { restore 3; }``: a group opens
        return None
    return command[: s.cut], command[s.start :]


def from_tool_call(name: str, arguments: str) -> ContextCommand:
    """The context command a call of function tool ``name`` is; its argument is the call's values
    joined (``{"steps": [3, 4]}`` is ``restore 3 4``), or the raw text when it is not a JSON object."""
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return ContextCommand(name, arguments.strip())
    if not isinstance(args, dict):
        return ContextCommand(name, str(args))
    words: list[str] = []
    for v in args.values():
        if isinstance(v, list):
            words.append(" ".join(str(x) for x in v if isinstance(x, (str, int, float))))
        elif isinstance(v, (str, int, float)) and not isinstance(v, bool):
            words.append(str(v))
    return ContextCommand(name, " ".join(words).strip())


@dataclass(frozen=True, slots=True)
class Recognizer:
    """Which context commands one agent surface answers, and in which forms."""

    functions: frozenset[str] = frozenset(COMMAND_NAMES)
    """Context commands offered (and so recognized) as function tools."""
    shell: frozenset[str] = frozenset(COMMAND_NAMES)
    """Context commands recognized as a shell command."""
    text: bool = True
    """Read the only ```bash command of a reply without tool calls."""
    shell_tool: bool = True
    """The agent has a shell tool (one of ``SHELL_TOOLS``)."""
    compound: bool = False
    """Read a restore after another command (``ls; restore 3``) as one, answered "Not run" where
    the whole call decides. A streamed shell call is held from the separator before it and split
    (``proxy.compound``); a streamed text reply's command block is released by its first word
    (``proxy.early``), so there the client's shell gets the restore (a gap)."""

    def command(self, tool: str, command: str) -> ContextCommand | None:
        """The context command an action (``tool`` called with ``command``) is, else None."""
        if tool in COMMAND_NAMES:
            return from_tool_call(tool, command) if tool in self.functions else None
        cmd = from_shell(command, compound=self.compound)
        return cmd if cmd is not None and cmd.name in self.shell else None

    @property
    def possible(self) -> bool:
        """Whether any reply could carry a context command this recognizer answers."""
        return bool(self.functions) or (bool(self.shell) and (self.text or self.shell_tool))


ANY = Recognizer()
"""Every command in every form: how a recorded run without the answering surface's record is read."""


def active(*, spans: bool, ledger: bool) -> frozenset[str]:
    """The context commands answered: restore and expand always, span and ledger commands when
    those mechanisms are on (otherwise they are ordinary shell commands)."""
    return ALWAYS | (SPAN_COMMANDS if spans else frozenset()) | (LEDGER_COMMANDS if ledger else frozenset())
