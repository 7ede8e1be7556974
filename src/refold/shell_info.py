"""What one command touches, as ``shell.analyze`` and ``named_tools.analyze_tool`` judge it, and the
file SWE-agent's windowed tools act on (threaded through a run's commands in order)."""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["CommandInfo", "OpenFile"]


@dataclass(frozen=True, slots=True)
class CommandInfo:
    kind: str  # "read" | "search" | "edit" | "test" | "command"
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    writes_anything: bool  # may change files we cannot name (git checkout, patch, ...)
    open_reads: bool = False  # reads the file opened last (SWE-agent goto/scroll_down)
    open_writes: bool = False  # writes the file opened last (SWE-agent edit N:M); see OpenFile
    opens: str | None = None  # makes this the open file (SWE-agent open/create)
    first_line: int | None = None  # file line of the output's first line (cat f, sed -n '40,80p' f)
    filtered: bool = False  # a pipeline's output went through a filter (``make 2>&1 | tail``)
    exit_of: str | None = None  # the filter whose exit status the command line's is (it ends in one)
    echo_after: str | None = None  # 'cmd; echo "rc=$?"' -> 'rc=$?', 'cmd && echo ok' -> 'ok': its last line


@dataclass(slots=True)
class OpenFile:
    """The file SWE-agent's windowed tools act on, for one run: feed it every command in order.

    ``advance(info)`` returns ``info`` with ``open_reads``/``open_writes`` resolved into ``reads``/
    ``writes`` and then moves to the file ``info`` opens. A write to the open file while none is
    known becomes ``writes_anything`` (conservative).
    """

    path: str | None = None

    def resolve(self, info: CommandInfo) -> CommandInfo:
        if not (info.open_reads or info.open_writes):
            return info
        reads, writes, anything = info.reads, info.writes, info.writes_anything
        if info.open_reads and self.path is not None:
            reads = tuple(dict.fromkeys((*reads, self.path)))
        if info.open_writes:
            if self.path is not None:
                writes = tuple(dict.fromkeys((*writes, self.path)))
            else:
                anything = True
        return replace(info, reads=reads, writes=writes, writes_anything=anything, open_reads=False, open_writes=False)

    def advance(self, info: CommandInfo) -> CommandInfo:
        resolved = self.resolve(info)
        if info.opens is not None:
            self.path = info.opens
        return resolved
