"""A saved mini run named on the command line (``refold sessions show|expand|pin RUN``): telling it
from a session name, loading it with the config it rendered with, and writing a pin into it (and
into the pins file a live run re-reads before every call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import PolicyError, RefoldError
from ..history import History
from ..pinning import pin_record, pinned_items

_RUN_SUFFIXES = (".json", ".traj", ".jsonl", ".gz")


def is_run_file(ident: str) -> bool:
    """A saved run: an existing file named like one (a session called ``a`` next to a file ``a``
    stays a session)."""
    from ..loaders import split_source

    file, _agent = split_source(ident)  # FILE#Agent: one agent of a multi-agent file
    if not ("/" in file or file.endswith(_RUN_SUFFIXES)):
        return False
    if not Path(file).expanduser().is_file():
        raise PolicyError(f"no run file {file} (a session id or name has no '/' and no .json ending)")
    return True


def load_run(path: str, overrides: list[str] | None) -> tuple[History, Config, dict[str, Any]]:
    """A saved run, the config it rendered with (a refold run's own; defaults else), its JSON."""
    from ..integrations.saved import config_for
    from ..json_file import read_json
    from ..loaders import load, split_source

    data = read_json(split_source(path)[0])
    history = load(path)
    try:
        saved = config_for(data) if isinstance(data, dict) else Config()
    except PolicyError as e:  # a hand-edited info.config.refold: say which file holds it
        raise PolicyError(f"{split_source(path)[0]}: {e}") from None
    cfg = saved.override(overrides or [])
    return history, cfg, data if isinstance(data, dict) else {}


def file_header(path: str, data: dict[str, Any]) -> dict[str, Any]:
    from ..formats.mini import read_pins

    return {"format": "refold-run-1", "path": path, "pins": pinned_items(read_pins(data, path))}


def _writable(path: Path, what: str) -> None:
    """A file with no write permission bit is read-only for everyone, root included (root may
    write it, but the owner marked it so: a recorded data set)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # a new file (the live pins file), or the write names the problem
    if not mode & 0o222:
        raise PolicyError(f"{what} is read-only (no write permission); nothing was written")


def _live_pins(path: str, info: dict[str, Any]) -> Path | None:
    """The pins file a live mini run re-reads (``info.config.refold.pins_file``), checked before
    anything is written: it must be a pins file (or not exist yet), since a run may name any file."""
    from ..formats.mini import PINS
    from ..json_file import read_json

    config = info.get("config")
    refold = config.get("refold") if isinstance(config, dict) else None
    live = refold.get("pins_file") if isinstance(refold, dict) else None
    if not isinstance(live, str) or not live:
        return None
    side = Path(live).expanduser()
    if not side.is_absolute():
        side = Path(path).resolve().parent / side
    if side.exists():
        try:
            data = read_json(side)
        except RefoldError:
            data = None
        if not (isinstance(data, dict) and set(data) <= {PINS}):
            raise PolicyError(f"{path}: its pins file {side} holds something other than pins; nothing was written")
        _writable(side, str(side))
    return side


_KINDS = {"claude-code": "a Claude Code session log", "codex": "a Codex rollout"}
"""What a JSON Lines run is, by its loader's format (a JSON list is a plain message list)."""


def pin_file(path: str, item: str, overrides: list[str] | None, *, on: bool) -> tuple[str, str, list[str]]:
    """Add the pin to the trajectory (``info.refold_pins``) and to the live run's pins file, if it
    names one (that is what a running mini reads before its next call)."""
    from ..formats.mini import PINS, read_pins
    from ..integrations.mini_record import write_json
    from ..json_file import read_json
    from ..loaders import split_source

    file, agent = split_source(path)
    _writable(Path(file), file)
    history, cfg, data = load_run(path, overrides)
    if agent is not None and data:  # it was written to a new file named 'FILE#Agent', a copy of the whole run
        raise PolicyError(
            f"{file}: pins are saved per run file and this one holds several agents' runs, "
            f"so '{agent}' cannot be pinned alone (nothing was written)"
        )
    if not data:
        kind = _KINDS.get(str(history.meta.get("format")))
        if kind is not None:  # the harness owns its log: refold only reads it
            raise PolicyError(
                f"{path}: {kind} cannot carry pins (refold only reads it; a session served by refold serve can: "
                "refold sessions pin ID)"
            )
        raise PolicyError(f"{path}: a plain message list cannot carry pins (save the run as a mini trajectory)")
    record = pin_record(history, item, on=on, where=path, config=cfg)
    data = read_json(path, scrub=False)  # written back as recorded: a lone surrogate stays one, not U+FFFD
    records = [*read_pins(data, path), record]
    info = data.setdefault("info", {})
    if not isinstance(info, dict):
        raise PolicyError(f"{path}: field 'info' is not an object")
    side = _live_pins(path, info)
    info[PINS] = records
    try:
        write_json(path, data)
        if side is not None:
            known = read_pins(read_json(side), str(side)) if side.is_file() else []
            write_json(side, {PINS: [*known, record]})
    except OSError as e:
        raise PolicyError(f"cannot write the pin to {e.filename or path}: {e.strerror or e}") from None
    return str(record["item"]), path, pinned_items(records)
