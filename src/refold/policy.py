"""``Policy``, the ``policy`` section of ``refold.config.Config`` (the seed's switches and the
renderer's thresholds, defaults here), and ``Settings``, the frozen, validated base of every section."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from .errors import SettingError


def setting_error(e: ValidationError, section: str, model: type[BaseModel]) -> SettingError:
    """The first error of ``e`` as one line naming the field (and, if unknown, the allowed ones)."""
    err = e.errors()[0]
    loc = [str(p) for p in err.get("loc", ())]
    field = ".".join(loc) or section
    if err.get("type") == "extra_forbidden":
        owner: Any = model
        for part in loc[:-1]:  # the section the unknown field was given in
            info = getattr(owner, "model_fields", {}).get(part)
            owner = info.annotation if info is not None else None
        allowed = tuple(getattr(owner, "model_fields", {}) or model.model_fields)
        return SettingError(section, field, "unknown field", allowed)
    return SettingError(section, field, str(err.get("msg", "invalid value")))


_SETTINGS_DOC = """A frozen group of settings; building one with a bad value raises one ``SettingError`` line.

    The check wraps the class call only (``Policy(k=0)``): nested sections and ``model_validate``
    keep pydantic's errors, which ``Config.parse`` turns into a line naming the full path. It is
    hidden from type checkers, which keep pydantic's field-by-field signature: ``Policy(k=3)``
    type-checks under ``mypy --strict`` without the pydantic plugin.
    """

if TYPE_CHECKING:

    class Settings(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        section: ClassVar[str]

else:

    class _SettingsMeta(type(BaseModel)):
        def __call__(cls, /, *args, **kwargs):
            try:
                return super().__call__(*args, **kwargs)
            except ValidationError as e:
                raise setting_error(e, cls.section, cls) from None

    class Settings(BaseModel, metaclass=_SettingsMeta):
        __doc__ = _SETTINGS_DOC
        model_config = ConfigDict(frozen=True, extra="forbid")
        section: ClassVar[str] = "config"

        @field_validator("*", mode="before")
        @classmethod
        def _no_switch_for_a_number(cls, value, info):
            # pydantic reads true as 1: `mask_after: true` in a YAML config silently masked after 1 step
            if isinstance(value, bool) and info.field_name and _numeric(cls.model_fields[info.field_name].annotation):
                raise PydanticCustomError("number_not_bool", "Input should be a number, not true or false")
            return value


def _numeric(annotation: Any) -> bool:
    """Whether a field holds a number (int/float, maybe None) and no true/false."""
    kinds = get_args(annotation) or (annotation,)
    return bool not in kinds and any(k in (int, float) for k in kinds)


class Policy(Settings):
    """How the renderer projects a history into a prompt.

    The first four switches are the seed's ablations; everything else tunes them.
    """

    section: ClassVar[str] = "policy"

    dedup: bool = True
    """Replace output that repeats what an earlier step still shows by a stub."""
    fold: bool = True
    """Fold steps the agent marked STALE into one-line notes."""
    chunk: bool = True
    """Act only behind a boundary that moves every ``k`` steps (keeps the prefix cached)."""
    k: int = Field(default=3, ge=1, le=1000)
    reversible: bool = True
    """Removed content can be brought back with ``restore``; off = gone for good (ablation)."""

    protocol: bool = True
    """Add the context-management section to the system prompt and label outputs ``[step N]``."""
    reminders: bool = True
    """Remind the agent, with the next observation, when a reply lacks PROGRESS/STALE."""

    dedup_min_lines: int = Field(default=3, ge=1)
    """A repeated run must span at least this many lines to be cut ..."""
    dedup_min_chars: int = Field(default=200, ge=1)
    """... and at least this many characters (a stub costs ~40 tokens)."""
    outline_min_lines: int = Field(default=25, ge=1)
    """Stubs of code spans at least this long keep a signature outline."""

    mask_after: int | None = Field(default=2, ge=1)
    """Automatic masking: outputs behind the boundary more than this many steps old become
    restorable one-line notes even if never marked STALE (for agents that never write STALE)."""
    mask_by: Literal["arrival", "use", "edit"] = "arrival"
    """What ``mask_after`` counts from: the step an output arrived (``arrival``) or the last reply
    naming a path, test id or error string it shows (``use``: an output the agent is still working
    from stays shown). Either way it is decided when the boundary moves, from the replies given by
    the first call at that boundary (``refold.mechanisms.use``). ``use`` lowers hidden-then-needed
    (real Claude Code logs 11.1% -> 7.8%) but keeps more (tokens 0.59x -> 0.63x of base; SWE-bench
    runs cost +0.02): benchmarks/results/mask_by_*.txt. ``edit``: a file's latest read stays shown
    while a reply after it writes that file (``refold.mechanisms.edits``)."""
    mask_min_chars: int = Field(default=200, ge=0)
    """Outputs shorter than this are never masked (a note would not save anything)."""
    restore_hold: int = Field(default=10, ge=0)
    """A restored step stays as restored (never stubbed, masked only this many steps after the
    boundary passes it) unless the agent marks it STALE: an agent working from it keeps seeing it."""
    protect: tuple[str, ...] = ()
    """Outputs never hidden (masked, stubbed, trimmed or folded), one rule each: ``tool:GLOB`` a
    tool's name, ``path:GLOB`` a file the command reads (``path:*.md``, ``path:PLAN.md``), anything
    else a glob on the command (``cat */CLAUDE.md``). Matched when the step arrives, so protecting
    an output never costs a boundary move (``refold.mechanisms.pins``)."""
    mask_replies: bool = True
    """With masking, old replies keep only their head, first line and commands (their reasoning
    restorable), whatever their outputs' size."""
    reply_after: int | None = Field(default=0, ge=0)
    """With ``mask_replies``: replies behind the boundary more than this many steps are condensed
    (None: as old as masked outputs, ``mask_after``). 0, the default: every reply behind the
    boundary, while outputs stay ``mask_after`` steps longer. The reasoning of a reply is the part
    later replies need least (their own conclusions carry it on), and condensing it at the move
    that masks outputs anyway adds no recomputation (measured: benchmarks/results/default*.txt)."""

    @field_validator("protect", mode="before")
    @classmethod
    def _protect_rules(cls, value: object) -> object:
        if isinstance(value, str):
            value = (value,)  # one rule given on its own (a YAML scalar, a single flag)
        if isinstance(value, (list, tuple)):
            for rule in value:
                if not isinstance(rule, str):
                    continue  # the type check names it
                glob = rule.split(":", 1)[1] if rule.startswith(("tool:", "path:")) else rule
                if not glob.strip():
                    raise PydanticCustomError("empty_rule", "a rule needs a pattern, e.g. 'tool:read_file', 'path:*.md' or 'cat PLAN.md'")
        return value

    def boundary(self, t: int) -> int:
        """b_t = max(0, k * floor((t - k) / k)); without chunking every step is behind it."""
        if not self.chunk:
            return t
        return max(0, self.k * ((t - self.k) // self.k))

    @classmethod
    def parse(cls, **values: object) -> Policy:
        """Build a policy from user input, raising a one-line PolicyError on a bad field."""
        try:
            return cls.model_validate(values)
        except ValidationError as e:
            raise setting_error(e, "policy", cls) from None


DEFAULT = Policy()
