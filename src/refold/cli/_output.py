"""CLI subcommands; each module defines ``register(app: typer.Typer) -> None``."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import PolicyError


def check_output(path: Path, flag: str) -> None:
    """Fail early (a usage error) when ``path`` cannot be written, before any long work starts."""
    if path.is_dir():
        raise PolicyError(f"{flag} {path} is a folder; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise PolicyError(f"cannot write {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise PolicyError(f"cannot write {path}: permission denied")


def write_output(path: Path, text: str) -> None:
    """Write ``text`` to ``path``; an OSError becomes one usage-error line."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise PolicyError(f"cannot write {path}: {e.strerror or e}") from None
