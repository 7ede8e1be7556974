"""What survives a fold (seed 001: "a diff, a commit hash, a test result and a probe's output").

Read from the steps a span or ``fold_steps`` folds: every edit in any form refold reads, commits,
and the last run of every test or probe script with the lines that carry its verdict.
"""

from __future__ import annotations

import re

from ..types import Step

__all__ = ["artefacts"]

_COMMIT = re.compile(r"\[[^\]\s]+(?: \([^)]*\))? ([0-9a-f]{7,40})\]\s*(.*)")
_CREATE = re.compile(r"(?:^|[;&|]\s*)(?:cat|printf|echo)\b[^>\n]*(?<!>)>\s*([^\s;&|<>]+)")


def artefacts(steps: list[Step], edit_chars: int = 600) -> list[str]:
    """Durable results of ``steps`` (seed 001: "a diff, a commit hash, a test result and a probe's
    output"): every edit in any form refold reads (with the edit: SWE-agent ``edit``/``create``,
    ``sed -i``, heredocs, editor tools, patches), commits, and the last run of every test or probe
    script with its verdict lines."""
    out: list[str] = []
    runs: dict[str, str] = {}  # script or test command -> its last run, in first-run order
    opened: str | None = None  # SWE-agent's open file: where an ``edit N:M`` writes
    for step in steps:
        texts = step.output_texts
        for j, action in enumerate(step.actions):
            if action.context is not None:
                continue
            output = texts[j] if j < len(texts) else (texts[-1] if texts else "")
            info = action.effects
            cmd = action.command.strip()
            opened = info.opens or opened
            commit = _COMMIT.search(output) if "commit" in cmd else None
            if commit:
                out.append(f"- step {step.index} commit {commit.group(1)}: {commit.group(2).strip()[:120]}")
            elif info.kind == "edit":
                created = _created(cmd, action.tool)
                named = list(info.writes) or ([opened] if info.open_writes and opened else [])
                paths = ", ".join(named) or "files"
                verb = "created" if created and set(info.writes) <= created else "edited"
                tool = f" ({action.tool})" if action.tool not in _SHELL else ""
                out.append(f"- step {step.index} {verb} {paths}{tool}:\n" + _indent(_clip(cmd, edit_chars)))
            elif info.kind == "test" or _PROBE.search(cmd):
                key = _first_line(cmd, 200)
                runs.pop(key, None)  # the last run counts, listed where it happened
                verdict = _verdict(output)
                runs[key] = f"- step {step.index} {'test' if info.kind == 'test' else 'probe'} ($ {_first_line(cmd)}):\n" + _indent(verdict)
    out += runs.values()
    return out


_SHELL = frozenset({"bash", "shell", "sh", "execute_bash", "run", "terminal"})
_PROBE = re.compile(
    r"^(?:\S+=\S+\s+)*(?:timeout\s+\d+\s+)?(?:python[\d.]*|node|ruby|perl|php|bash|sh|go run|cargo run|java)\s+(?:-\w+\s+)*[\w./-]+\.(?:py|js|mjs|ts|rb|pl|php|sh|go|java)\b"
    r"|^\./[\w./-]+(?:\s|$)"
)
_VERDICT = re.compile(
    r"\b(?:pass(?:ed|es)?|fail(?:ed|s|ure)?|error|errors|ok|xfail|skipped|assert\w*|traceback|exception|"
    r"success(?:ful(?:ly)?)?|result|expected|got|true|false|mismatch|differ)\b|\w+(?:Error|Exception):|^=+ .* =+$",
    re.IGNORECASE,
)


_PROMPT_NOISE = re.compile(r"^\s*(?:\((?:Open file|Current directory):|bash-\$\s*$)")  # SWE-agent's state lines


def _verdict(output: str, limit: int = 5) -> str:
    """The lines of a run's output that say how it went (the last ones), else its last lines."""
    lines = [ln.rstrip() for ln in _strip_tags(output).splitlines() if ln.strip() and not _PROMPT_NOISE.match(ln)]
    said = [ln for ln in lines if _VERDICT.search(ln)]
    chosen = (said or lines)[-limit:] if lines else ["(no output)"]
    return "\n".join(_clip(ln, 200) for ln in chosen)


def _created(cmd: str, tool: str) -> set[str]:
    if tool not in ("bash", "shell", "execute_bash", "run"):
        return set(re.findall(r'"(?:path|file|filename|file_path)"\s*:\s*"([^"]+)"', cmd)) if '"create"' in cmd else set()
    from ..shell_paths import normalize_path

    first = cmd.split("\n", 1)[0]
    found = {normalize_path(p) for p in _CREATE.findall(first) if not p.startswith("/dev/")}
    for m in re.finditer(r"\btouch\s+([^\s;&|]+)", first):
        found.add(normalize_path(m.group(1)))
    return found


def _strip_tags(text: str) -> str:
    return re.sub(r"<returncode>.*?</returncode>|</?(output|stdout|stderr)>", "", text)


def _first_line(text: str, limit: int = 80) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _indent(text: str) -> str:
    return "\n".join("    " + ln for ln in text.splitlines())
