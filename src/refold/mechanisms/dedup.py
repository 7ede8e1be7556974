"""Deduplication: output that repeats what an earlier step still shows becomes a stub.

Works on lines: runs of at least ``min_lines`` consecutive lines (and ``min_chars`` characters)
that appear, in order, in the shown output of an earlier step are cut and replaced by one marker
line naming that step. An output that is (almost) all repeats becomes a single stub. Earlier file
reads stop being sources once a later command may have written the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol import CM
from ..shell import CommandInfo, paths_overlap

_W = 3  # lines per shingle
_MAX_CANDIDATES = 8  # most recent positions kept per shingle
_WHOLE_SLACK = 80  # characters of new text an output may have and still become one stub


@dataclass(slots=True)
class _Source:
    step: int
    lines: list[str]
    first_line: list[int]  # line number in the step's original output, per line
    paths: tuple[str, ...]
    is_file_view: bool


@dataclass(frozen=True, slots=True)
class Run:
    start: int  # line index in the target (0-based, inclusive)
    end: int  # exclusive
    source_step: int
    source_first: int  # 1-based line in the source step's output
    source: int = -1  # index of the source in the DedupIndex


@dataclass(frozen=True, slots=True)
class DedupResult:
    text: str  # the body to show
    kind: str  # "received" | "stub" | "trimmed"
    sources: tuple[int, ...] = ()
    omitted_lines: int = 0


@dataclass(slots=True)
class DedupIndex:
    min_lines: int = 3
    min_chars: int = 200
    outline_min_lines: int = 25
    reversible: bool = True
    _shingles: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    _sources: list[_Source] = field(default_factory=list)
    _whole: dict[str, int] = field(default_factory=dict)
    _last_write: dict[str, int] = field(default_factory=dict)
    _last_write_any: int = 0
    _retired: set[int] = field(default_factory=set)

    def note_writes(self, step: int, info: CommandInfo) -> None:
        for p in info.writes:
            self._last_write[p] = step
        if info.writes_anything:
            self._last_write_any = step

    def retire(self, step: int) -> None:
        """Stop using a step's output as a source (it is no longer shown)."""
        self._retired.add(step)

    def _valid(self, src: _Source) -> bool:
        if src.step in self._retired:
            return False
        if not src.is_file_view:
            return True  # identical command output is identical, whenever it was produced
        if self._last_write_any > src.step:
            return False
        for p in src.paths:
            for w, at in self._last_write.items():
                if at > src.step and paths_overlap(p, w):
                    return False
        return True

    def process(self, step: int, body: str, info: CommandInfo | None) -> DedupResult:
        """Dedup ``body`` (an output of ``step``) against earlier shown outputs, then index what stays shown."""
        lines = body.split("\n")
        runs = self._find_runs(lines)
        whole_src = self._whole.get(body)
        if not runs and whole_src is not None and len(body) >= self.min_chars and self._valid(self._sources[whole_src]):
            src = self._sources[whole_src]
            result = DedupResult(self._stub_text(step, [src.step], body, info, 0, len(lines)), "stub", (src.step,), len(lines))
            return result
        if not runs:
            self._index(step, lines, list(range(1, len(lines) + 1)), info)
            return DedupResult(body, "received")
        covered = sum(r.end - r.start for r in runs)
        new_chars = sum(len(lines[i]) + 1 for i in _uncovered(runs, len(lines)))
        sources = tuple(dict.fromkeys(r.source_step for r in runs))
        if new_chars <= _WHOLE_SLACK and self._repeats_only(lines, runs):
            return DedupResult(
                self._stub_text(step, list(sources), body, info, 0, len(lines)), "stub", sources, covered
            )
        out: list[str] = []
        kept: list[str] = []
        kept_no: list[int] = []
        pos = 0
        for r in runs:
            for i in range(pos, r.start):
                out.append(lines[i])
                kept.append(lines[i])
                kept_no.append(i + 1)
            out.append(self._marker(step, r, lines, info))
            pos = r.end
        for i in range(pos, len(lines)):
            out.append(lines[i])
            kept.append(lines[i])
            kept_no.append(i + 1)
        self._index(step, kept, kept_no, info)
        return DedupResult("\n".join(out), "trimmed", sources, covered)

    def _repeats_only(self, lines: list[str], runs: list[Run]) -> bool:
        """Every line outside the runs is blank or shown by a source step too, so "it repeats" is true.

        A rerun whose only new line is ``9 passed`` (``1 failed`` before) must not be stubbed as a repeat.
        """
        shown: set[str] | None = None
        for i in _uncovered(runs, len(lines)):
            if not lines[i].strip():
                continue
            if shown is None:
                shown = {ln for si in {r.source for r in runs} for ln in self._sources[si].lines}
            if lines[i] not in shown:
                return False
        return True

    # ---- matching ---------------------------------------------------------------------------

    def _find_runs(self, lines: list[str]) -> list[Run]:
        runs: list[Run] = []
        n = len(lines)
        p = 0
        while p + _W <= n:
            cands = self._shingles.get(hash(tuple(lines[p : p + _W])))
            best_len, best = 0, None
            if cands:
                for si, q in reversed(cands):
                    src = self._sources[si]
                    sl = src.lines
                    if (
                        not self._valid(src) or sl[q : q + _W] != lines[p : p + _W]
                    ):  # a hash collision is no match
                        continue
                    length = _W
                    while p + length < n and q + length < len(sl) and lines[p + length] == sl[q + length]:
                        length += 1
                    if length > best_len:
                        best_len, best = length, (si, q)
            if best is not None and best_len >= self.min_lines:
                chars = sum(len(x) + 1 for x in lines[p : p + best_len])
                if chars >= self.min_chars:
                    si, q = best
                    src = self._sources[si]
                    runs.append(Run(p, p + best_len, src.step, src.first_line[q], si))
                    p += best_len
                    continue
            p += 1
        return runs

    def _index(self, step: int, lines: list[str], numbers: list[int], info: CommandInfo | None) -> None:
        body = "\n".join(lines)
        si = len(self._sources)
        paths = info.reads if info else ()
        self._sources.append(_Source(step, lines, numbers, paths, bool(info and info.kind in ("read", "search"))))
        if len(body) >= self.min_chars:
            self._whole.setdefault(body, si)
        for q in range(0, len(lines) - _W + 1):
            # only indices inside one contiguous kept segment make a shingle
            if numbers[q + _W - 1] - numbers[q] != _W - 1:
                continue
            key = hash(tuple(lines[q : q + _W]))
            lst = self._shingles.setdefault(key, [])
            lst.append((si, q))
            if len(lst) > _MAX_CANDIDATES:
                del lst[0]

    # ---- texts ------------------------------------------------------------------------------

    def _restore_hint(self, step: int) -> str:
        return f" `restore {step}` shows it again." if self.reversible else ""

    def _stub_text(self, step: int, sources: list[int], body: str, info: CommandInfo | None, lo: int, hi: int) -> str:
        refs = " and ".join(f"[step {s}]" for s in sources)
        text = f"{CM} Output omitted ({hi - lo} lines): it repeats what {refs} shows above.{self._restore_hint(step)}"
        return text + _outline_suffix(body, info, self.outline_min_lines)

    def _marker(self, step: int, run: Run, lines: list[str], info: CommandInfo | None) -> str:
        n = run.end - run.start
        text = (
            f"{CM} {n} lines omitted here (lines {run.start + 1}-{run.end} of this output): "
            f"the same as in [step {run.source_step}] above."
        )
        if self.reversible:
            text += f" `restore {step}` shows them."
        return text + _outline_suffix("\n".join(lines[run.start : run.end]), info, self.outline_min_lines)


def _uncovered(runs: list[Run], n: int) -> list[int]:
    out: list[int] = []
    pos = 0
    for r in runs:
        out.extend(range(pos, r.start))
        pos = r.end
    out.extend(range(pos, n))
    return out


def _outline_suffix(text: str, info: CommandInfo | None, min_lines: int) -> str:
    if text.count("\n") + 1 < min_lines:
        return ""
    from .. import outline as ol  # lazy: tree-sitter loads only when a long code span is stubbed

    path = info.reads[0] if info and info.reads else None
    code, numbers = ol.strip_line_numbers(text)
    language = ol.language_for(path, code)
    if language is None:
        return ""
    entries = ol.outline(text, path=path, language=language)
    if not entries:
        return ""
    return "\nOutline of the omitted lines:\n" + ol.format_outline(entries)
