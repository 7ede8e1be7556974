"""OpenAI-style errors: every failure the proxy reports has the shape clients already parse."""

from __future__ import annotations

from typing import Any

from ..errors import RefoldError


class ProxyError(RefoldError):
    """An error answered to the client as ``{"error": {...}}`` with an HTTP status."""

    def __init__(
        self, status: int, message: str, *, type: str = "invalid_request_error", code: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code)


class ConfigError(RefoldError):
    """The proxy was configured in a way that cannot run safely (e.g. public bind without a token)."""


class StoreConflict(Exception):
    """Another writer moved a session's head first; reload and try again."""


def error_body(message: str, type: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": None, "code": code}}
