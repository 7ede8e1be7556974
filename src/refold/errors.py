"""One exception tree for refold.

    RefoldError
    ├── TrajectoryError      a trajectory file cannot be read (names file and reason)
    ├── PolicyError          an invalid policy / configuration value
    └── CommandError         a context command the agent issued is malformed
"""

from __future__ import annotations


class RefoldError(Exception):
    """Base of every error refold raises on purpose."""


class TrajectoryError(RefoldError):
    """A trajectory could not be loaded; the message names the file and what is wrong."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class PolicyError(RefoldError):
    """A policy or configuration value is invalid."""


class CommandError(RefoldError):
    """A context command (restore, fold, ...) could not be understood."""
