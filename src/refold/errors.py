"""Every exception refold defines, in one place.

    Exception
    ├── RefoldError            base of every error refold raises on purpose
    │   ├── TrajectoryError    a trajectory file cannot be read (names file and reason)
    │   ├── PolicyError        an invalid policy / configuration value (names the field)
    │   │   └── SettingError   a Policy/Config section built with a bad value (section, field, reason)
    │   ├── CommandError       a context command the agent issued is malformed
    │   ├── ConfigError        the proxy cannot run safely as configured (bind, token, store URL)
    │   ├── ProxyError         answered to an HTTP client as ``{"error": {...}}`` with a status
    │   │   └── StoreUnavailable   the session store failed (disk, lock, Redis, file gone): a 503
    │   ├── RunError           ``refold run`` cannot start mini-swe-agent (task, model, config)
    │   ├── ServerSimError     a server simulation cannot run as asked
    │   ├── KVCapacityError    a simulated KV pool cannot hold a request (also a ValueError)
    │   └── ItemError          a step or span named to expand or pin is not in the run (also a ValueError)
    ├── StoreConflict          another writer moved a session's head first: reload and retry
    └── StaleConnection        a pooled upstream connection failed before answering: retry once
    (the last two are internal retry signals of the proxy; they never reach a user)

The command line prints a RefoldError as one line and exits 2; the proxy answers a ProxyError
with its status and body and a ConfigError before it starts listening.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CommandError",
    "ConfigError",
    "ItemError",
    "KVCapacityError",
    "PolicyError",
    "ProxyError",
    "RefoldError",
    "RunError",
    "ServerSimError",
    "SettingError",
    "StaleConnection",
    "StoreConflict",
    "StoreUnavailable",
    "TrajectoryError",
]


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


class SettingError(PolicyError):
    """An invalid setting: ``section``, ``field`` (dotted) and ``reason`` name what is wrong."""

    def __init__(self, section: str, field: str, reason: str, allowed: tuple[str, ...] = ()) -> None:
        if allowed:
            message = f"unknown {section} field '{field}'; allowed: {', '.join(allowed)}"
        else:
            message = f"invalid {section} field '{field}': {reason}"
        super().__init__(message)
        self.section, self.field, self.reason = section, field, reason


class CommandError(RefoldError):
    """A context command (restore, fold, ...) could not be understood."""


class ConfigError(RefoldError):
    """The proxy was configured in a way that cannot run safely (e.g. public bind without a token)."""


class ProxyError(RefoldError):
    """An error answered to the client as ``{"error": {...}}`` (OpenAI's shape) with an HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})  # response headers to send with it (an upstream's retry-after)
        self.message = message
        self.type = type
        self.code = code
        self.param = param  # the request (or upstream reply) field at fault, e.g. messages[3].content

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class StoreUnavailable(ProxyError):
    """The session store failed (disk full, locked, unreachable, file deleted): a 503 with one line."""

    def __init__(self, cause: str) -> None:
        super().__init__(
            503, f"session store unavailable: {cause}", type="server_error", code="store_unavailable"
        )
        self.cause = cause


class RunError(RefoldError):
    """``refold run`` cannot start: no task, no model, or a bad mini-swe-agent configuration."""


class ServerSimError(RefoldError):
    """A server simulation cannot run as asked (bad sizes, a request that can never fit)."""


class KVCapacityError(RefoldError, ValueError):
    """A request needs more KV blocks/tokens than the simulated pool can free for it."""


class ItemError(RefoldError, ValueError):
    """A step or span a user named to expand or pin that the run does not have (one line)."""


class StoreConflict(Exception):
    """Another writer moved a session's head first; reload and try again."""


class StaleConnection(Exception):
    """The upstream connection failed before a response arrived (keep-alive race or refused
    connect); the proxy retries the request once on a fresh connection."""
