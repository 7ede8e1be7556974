"""Deduplication: output that repeats what an earlier step still shows becomes a stub.

Works on lines: runs of at least ``min_lines`` consecutive lines (and ``min_chars`` characters)
that appear, in order, in the shown output of an earlier step are cut and replaced by one marker
line naming that step. An output that is (almost) all repeats becomes a single stub. Earlier file
reads stop being sources once a later command may have written the file.

What an agent must still be able to read from a condensed output stays: the lines that carry
its verdict (mini's ``<returncode>``, exit status lines, a test run's summary and last lines) are
never cut; an output gets at most ``_MAX_MARKERS`` markers (the longest runs), so a file window
is never a patchwork of pointers; and a whole-output stub never cites an output whose verdict
differs (a failing run stubbed as "the same as" a passing one is kept as received instead).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ..outline_lines import head_rows
from ..protocol import CM
from ..shell_info import CommandInfo, OpenFile
from ..shell_paths import paths_overlap
from .output_verdict import verdict_lines, verdict_of
from .shingles import LINE, SHIFT, Shingles, kept_windows, window_hashes
from .shingles import W as _W
from .summary_wrap import printed_lines

_WHOLE_SLACK = 80  # characters of new text an output may have and still become one stub
_MAX_MARKERS = 2  # markers in one output; more runs keep only the longest ones

@dataclass(slots=True)
class _Source:
    step: int
    lines: list[str]
    first_line: list[int]  # line number in the step's original output, per line
    paths: tuple[str, ...]
    is_file_view: bool
    # the verdict lines of the step's whole output, or what they are read from when first asked
    # (most outputs are never compared: their lines are not scanned for it)
    known_verdict: tuple[str, ...] | None
    output: list[str] | None = None
    info: CommandInfo | None = None

    @property
    def verdict(self) -> tuple[str, ...]:
        if self.known_verdict is None:
            self.known_verdict = verdict_lines(self.output or [], self.info)
            self.output = None
        return self.known_verdict


@dataclass(frozen=True, slots=True)
class Run:
    start: int  # line index in the target (0-based, inclusive)
    end: int  # exclusive
    source_step: int
    source_first: int  # 1-based line in the source step's output
    source: int = -1  # index of the source in the DedupIndex
    source_pos: int = 0  # index of the run's first line in the source's kept lines


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
    _shingles: Shingles = field(default_factory=Shingles)
    _sources: list[_Source] = field(default_factory=list)
    _whole: dict[str, int] = field(default_factory=dict)
    # every write in step order: a source is checked against the writes after it only (bisect)
    _write_steps: list[int] = field(default_factory=list)
    _write_paths: list[str] = field(default_factory=list)
    _last_write_any: int = 0
    _retired: set[int] = field(default_factory=set)
    _open: OpenFile = field(default_factory=OpenFile)  # SWE-agent's open file, for edit N:M / goto
    # a source's validity, checked once per change: every write and retirement is a new generation,
    # and an invalid source stays invalid (writes come in step order, retirements are for good)
    _gen: int = 0
    _valid_at: dict[int, int] = field(default_factory=dict)  # source -> the generation it was valid at
    _invalid: set[int] = field(default_factory=set)

    def note_writes(self, step: int, info: CommandInfo) -> None:
        """Record what a step's command writes; call once per action, in step order, before ``process``.

        Writes to SWE-agent's open file (``edit 5:7``) are resolved here against the file the
        run opened last (``open``/``create`` earlier in the history), which this index tracks.
        """
        info = self._open.advance(info)
        for p in info.writes:
            self._write_steps.append(step)
            self._write_paths.append(p)
        if info.writes_anything:
            self._last_write_any = step
        if info.writes or info.writes_anything:
            self._gen += 1

    def retire(self, step: int) -> None:
        """Stop using a step's output as a source (it is no longer shown)."""
        self._retired.add(step)
        self._gen += 1

    def _valid(self, si: int) -> bool:
        """Whether source ``si`` may still be pointed at (every write since would have to be read)."""
        if self._valid_at.get(si) == self._gen:
            return True
        if si in self._invalid:
            return False
        if self._check(self._sources[si]):
            self._valid_at[si] = self._gen
            return True
        self._invalid.add(si)
        return False

    def _check(self, src: _Source) -> bool:
        if src.step in self._retired:
            return False
        if not src.is_file_view:
            return True  # identical command output is identical, whenever it was produced
        if self._last_write_any > src.step:
            return False
        later = self._write_paths[bisect.bisect_right(self._write_steps, src.step) :]
        return not any(paths_overlap(p, w) for w in later for p in src.paths)

    def process(self, step: int, body: str, info: CommandInfo | None) -> DedupResult:
        """Dedup ``body`` (an output of ``step``) against earlier shown outputs, then index what stays shown."""
        if info is not None:
            info = self._open.resolve(info)  # goto/scroll_down read the open file
        lines = body.split("\n")
        hashes = window_hashes(lines)  # once per output: matching and indexing both read them
        runs = self._find_runs(lines, hashes)
        everything = range(1, len(lines) + 1)
        whole_src = self._whole.get(body)
        if not runs and whole_src is not None and len(body) >= self.min_chars and self._valid(whole_src):
            src = self._sources[whole_src]
            result = DedupResult(self._stub_text(step, [src.step], body, info, 0, len(lines)), "stub", (src.step,), len(lines))
            return result
        if not runs:  # its verdict is read when a later output is compared with it, if ever
            self._index(step, lines, list(everything), info, None, hashes, body)
            return DedupResult(body, "received")
        verdict, protected = verdict_of(lines, info)
        covered = sum(r.end - r.start for r in runs)
        new_chars = sum(_chars(lines, a, b) for a, b in _gaps(runs, len(lines)))
        sources = tuple(dict.fromkeys(r.source_step for r in runs))
        if new_chars <= _WHOLE_SLACK and self._repeats_only(lines, runs):
            if all(self._sources[si].verdict == verdict for si in {r.source for r in runs}):
                return DedupResult(
                    self._stub_text(step, list(sources), body, info, 0, len(lines)), "stub", sources, covered
                )
            # it repeats outputs that ended otherwise: a stub would hide how this one ended
            self._index(step, lines, list(everything), info, verdict, hashes, body)
            return DedupResult(body, "received")
        runs = self._keep_verdict(runs, lines, protected)
        if len(runs) > _MAX_MARKERS:  # no patchwork: only the longest runs become markers
            longest = sorted(runs, key=lambda r: -_chars(lines, r.start, r.end))
            runs = sorted(longest[:_MAX_MARKERS], key=lambda r: r.start)
        if not runs:
            self._index(step, lines, list(everything), info, verdict, hashes, body)
            return DedupResult(body, "received")
        covered = sum(r.end - r.start for r in runs)
        sources = tuple(dict.fromkeys(r.source_step for r in runs))
        out: list[str] = []
        kept: list[str] = []
        kept_no: list[int] = []
        pos = 0
        numbers: list[int | None] | None = None  # file line of each output line, computed when needed
        for r in runs:
            out += lines[pos : r.start]
            kept += lines[pos : r.start]
            kept_no += everything[pos : r.start]
            if numbers is None and r.end - r.start >= self.outline_min_lines:
                numbers = _file_numbers(lines, info)
            out.append(self._marker(step, r, lines, info, numbers))
            pos = r.end
        out += lines[pos:]
        kept += lines[pos:]
        kept_no += everything[pos:]
        self._index(step, kept, kept_no, info, verdict, hashes, None)
        return DedupResult("\n".join(out), "trimmed", sources, covered)

    def _keep_verdict(self, runs: list[Run], lines: list[str], protected: set[int]) -> list[Run]:
        """Cut runs around the lines that carry the output's verdict; pieces too small to pay are kept."""
        if not protected:
            return runs
        rows = sorted(protected)
        out: list[Run] = []
        for r in runs:
            start = r.start
            inside = rows[bisect.bisect_left(rows, r.start) : bisect.bisect_left(rows, r.end)]
            for p in [*inside, r.end]:
                if p - start >= self.min_lines and _chars(lines, start, p) >= self.min_chars:
                    offset = start - r.start
                    src = self._sources[r.source]
                    pos = r.source_pos + offset
                    out.append(Run(start, p, r.source_step, src.first_line[pos], r.source, pos))
                start = p + 1
        return out

    def _repeats_only(self, lines: list[str], runs: list[Run]) -> bool:
        """Every line outside the runs is blank or shown by a source step too, so "it repeats" is true.

        A rerun whose only new line is ``9 passed`` (``1 failed`` before) must not be stubbed as a repeat.
        """
        shown: set[str] | None = None
        for a, b in _gaps(runs, len(lines)):
            for line in lines[a:b]:
                if not line.strip():
                    continue
                if shown is None:
                    shown = set().union(*(self._sources[si].lines for si in {r.source for r in runs}))
                if line not in shown:
                    return False
        return True

    # ---- matching ---------------------------------------------------------------------------

    def _find_runs(self, lines: list[str], hashes: list[int]) -> list[Run]:
        """Runs of ``lines`` (whose window hashes are ``hashes``) that an earlier shown output has."""
        runs: list[Run] = []
        if len(lines) < _W:
            return runs
        # the windows an earlier output also has: the others start no run (made in C)
        shingles = self._shingles
        known = shingles.known(hashes)
        levels = shingles.levels
        valid: dict[int, bool] = {}  # no write or retirement happens while one output is matched
        sources = self._sources
        p = 0
        for at in known:
            if at < p:
                continue  # inside the run found last
            p = at
            best_len, best = 0, None
            window = lines[p : p + _W]
            key = hashes[p]
            for level in levels:  # ``shingles.recent(key)`` inline: most positions cite retired sources
                c = level.get(key)
                if c is None:
                    break
                si = c >> SHIFT
                ok = valid.get(si)
                if ok is None:
                    ok = valid[si] = self._valid(si)
                if not ok:
                    continue
                q = c & LINE
                sl = sources[si].lines
                if sl[q : q + _W] == window:  # else a hash collision: no match
                    length = _extend(lines, p, sl, q, _W)
                    if length > best_len:
                        best_len, best = length, (si, q)
            if best is not None and best_len >= self.min_lines and _chars(lines, p, p + best_len) >= self.min_chars:
                si, q = best
                src = self._sources[si]
                runs.append(Run(p, p + best_len, src.step, src.first_line[q], si, q))
                p += best_len
                continue
            p += 1
        return runs

    def _index(
        self,
        step: int,
        lines: list[str],
        numbers: list[int],
        info: CommandInfo | None,
        verdict: tuple[str, ...] | None,
        hashes: list[int],
        body: str | None,
    ) -> None:
        """Make the kept ``lines`` (1-based lines ``numbers`` of an output whose window hashes are
        ``hashes``; ``body``: their text when they are the whole output) a source."""
        si = len(self._sources)
        paths = tuple(dict.fromkeys((*info.reads, *info.writes))) if info else ()
        # an edit's output (SWE-agent shows the edited window) is a view of the file, too
        view = bool(info and info.kind in ("read", "search", "edit"))
        lazy = (lines, info) if verdict is None else (None, None)  # then ``lines`` is the whole output
        self._sources.append(_Source(step, lines, numbers, paths, view, verdict, *lazy))
        text = "\n".join(lines) if body is None else body
        if len(text) >= self.min_chars:
            self._whole.setdefault(text, si)
        # only windows inside one contiguous kept segment make a shingle
        self._shingles.add(si, *kept_windows(hashes, numbers))

    # ---- texts ------------------------------------------------------------------------------

    def _restore_hint(self, step: int) -> str:
        return f" `restore {step}` shows it again." if self.reversible else ""

    def _stub_text(self, step: int, sources: list[int], body: str, info: CommandInfo | None, lo: int, hi: int) -> str:
        refs = " and ".join(f"[step {s}]" for s in sources)
        lines = body.split("\n")
        n = printed_lines(body) if (lo, hi) == (0, len(lines)) else hi - lo  # the output's lines, as a mask note counts them
        text = f"{CM} Output omitted ({n} line{'' if n == 1 else 's'}): it repeats what {refs} shows above.{self._restore_hint(step)}"
        if len(lines) < self.outline_min_lines:
            return text
        return text + _outline_suffix(lines, _file_numbers(lines, info), info, self.outline_min_lines)

    def _marker(
        self, step: int, run: Run, lines: list[str], info: CommandInfo | None, numbers: list[int | None] | None
    ) -> str:
        n = run.end - run.start
        text = (
            f"{CM} {n} lines omitted here (lines {run.start + 1}-{run.end} of this output): "
            f"the same as in [step {run.source_step}] above."
        )
        if self.reversible:
            text += f" `restore {step}` shows them."
        if numbers is None:
            return text
        span = slice(run.start, run.end)
        return text + _outline_suffix(lines[span], numbers[span], info, self.outline_min_lines, run.start)


def _extend(a: list[str], p: int, b: list[str], q: int, length: int) -> int:
    """How many lines ``a[p:]`` and ``b[q:]`` share from the start, given the first ``length`` match:
    galloping slice comparisons (made in C), so a long run costs about log(run) steps, not one per line."""
    limit = min(len(a) - p, len(b) - q)
    k = 8
    while length < limit and k:
        k = min(k, limit - length)
        if a[p + length : p + length + k] == b[q + length : q + length + k]:
            length += k
            k *= 2
        else:
            k //= 2
    return length


def _chars(lines: list[str], a: int, b: int) -> int:
    """Characters of ``lines[a:b]``, a newline after each (made in C)."""
    part = lines[a:b]
    return sum(map(len, part)) + len(part)


def _gaps(runs: list[Run], n: int) -> list[tuple[int, int]]:
    """The ranges of line indices outside ``runs`` (ascending), empty ones left out."""
    out: list[tuple[int, int]] = []
    pos = 0
    for r in runs:
        if r.start > pos:
            out.append((pos, r.start))
        pos = r.end
    if n > pos:
        out.append((pos, n))
    return out


def _file_numbers(lines: list[str], info: CommandInfo | None) -> list[int | None]:
    from .. import outline as ol  # lazy: tree-sitter loads only when a long code span is stubbed

    return ol.file_lines(lines, info.first_line if info else None)[1]


def _outline_suffix(
    lines: list[str], numbers: list[int | None], info: CommandInfo | None, min_lines: int, offset: int = 0
) -> str:
    """Outline of omitted lines, numbered by file line when known, else by line of this output.
    Like a summary, it reads the lines in the first ``SCAN`` characters only (a huge span costs no more)."""
    if len(lines) < min_lines:
        return ""
    from .. import outline as ol

    keep = head_rows(lines)
    lines, numbers = lines[:keep], numbers[:keep]

    path = info.reads[0] if info and info.reads else info.writes[0] if info and info.writes else None
    code_lines, _ = ol.file_lines(lines)
    if any(n is not None for n in numbers):
        rows = [i for i, n in enumerate(numbers) if n is not None]
        code = "\n".join(code_lines[i] for i in rows)
        nums = [n for n in numbers if n is not None]
        header = "\nOutline of the omitted lines:\n"
    else:  # not a file view we can number: say which lines of this output they are
        rows = [i for i, ln in enumerate(lines) if not ol.is_frame(ln)]
        code = "\n".join(lines[i] for i in rows)
        nums = [offset + i + 1 for i in rows]
        header = "\nOutline of the omitted lines (numbered by line of this output):\n"
    if not rows:
        return ""
    language = ol.language_for(path, code)
    if language is None:
        return ""
    entries = ol.outline(code, path=path, language=language, numbers=nums)
    if not entries:
        return ""
    return header + ol.format_outline(entries)
