"""An OpenAI-compatible proxy that folds every prompt: ``refold serve --upstream URL``.

Any client (the openai SDK, litellm, an agent framework) gets refold's rendering by changing its
base URL. Sessions are durable (SQLite WAL by default, Redis for replicas) and context commands
such as ``restore`` are answered by the proxy without the client seeing them.
"""

from __future__ import annotations

from .app import SESSION_HEADER, create_app
from .config import ProxyConfig
from .records import Store
from .sqlite_store import SQLiteStore
from .store import open_store

__all__ = [
    "SESSION_HEADER",
    "ProxyConfig",
    "SQLiteStore",
    "Store",
    "create_app",
    "open_store",
]
