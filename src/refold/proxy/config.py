"""Proxy settings (one frozen object built by ``refold serve``) and the bind-safety check."""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
from dataclasses import dataclass

from ..config import DEFAULT, Config
from ..errors import ConfigError
from ..mechanisms.ledger import LedgerPolicy
from ..mechanisms.spans import SpanPolicy
from ..policy import Policy
from ..render import Renderer
from ..tokens import TOKENIZER_NAMES, tokenizer_name

DEFAULT_PORT = 8077
DEFAULT_MAX_BODY = 32 * 1024 * 1024


@dataclass(frozen=True)
class ProxyConfig:
    upstream: str
    store: str = "refold-sessions.db"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    tokens: tuple[str, ...] = ()
    """Bearer tokens clients must present; each is its own tenant. Required off loopback."""
    upstream_key: str | None = None
    """Sent upstream; without it the client's own bearer is forwarded (only when ``tokens`` is empty)."""
    config: Config = DEFAULT
    """How prompts are rendered: the library's defaults unless a flag says otherwise."""
    max_rounds: int = 3
    """Context-command rounds the proxy answers itself per request before handing a reply back."""
    context_tools: bool = True
    """Offer the context commands as function tools next to the client's tools (requests with tools)."""
    context_tools_beside_shell: bool = False
    """Offer them also when the client has a shell tool (``bash``, ``shell``, ...), whose calls carry
    the context commands already: off by default, the schemas cost several hundred tokens a call."""
    strip_protocol: bool = False
    """Take the PROGRESS/STALE head out of the replies clients are shown; the history keeps it."""
    max_body: int = DEFAULT_MAX_BODY
    timeout: float = 600.0
    tokenizer: str = ""
    """Tokenizer for the tokens-saved metric (``chars4`` is a cheap estimate, ``off``): "" reads
    ``config.tokenizer``; given here, it replaces the config's, so the two always agree."""
    require_key: bool = False
    """Refuse requests that carry no credential (else they share one anonymous owner)."""
    allow_hosts: tuple[str, ...] = ()
    """Host names served besides loopback and the bound address (``*``: any)."""
    allow_origins: tuple[str, ...] = ()
    """Browser origins (``https://app.example``) allowed to call; none by default."""
    view_workers: int = 1
    """Processes building session HTML views (off the chat path)."""
    max_views: int = 8
    """Views building or queued at once; more get a 503 to retry."""

    def __post_init__(self) -> None:
        if self.tokenizer not in ("off", "") and tokenizer_name(self.tokenizer) is None:
            raise ConfigError(
                f"unknown --tokenizer {self.tokenizer!r}; valid choices: {', '.join(TOKENIZER_NAMES)}, off"
            )
        if self.tokenizer and self.tokenizer != self.config.tokenizer:
            object.__setattr__(self, "config", self.config.replace(tokenizer=self.tokenizer))
        object.__setattr__(self, "tokenizer", self.config.tokenizer)
        if not self.upstream.startswith(("http://", "https://")):
            raise ConfigError(f"--upstream must be an http(s) URL, got '{self.upstream}'")
        _check_upstream(self.upstream)
        if self.max_rounds < 0:
            raise ConfigError("--max-rounds must be >= 0")
        if self.max_body < 1024:
            raise ConfigError("--max-body must be at least 1024 bytes")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be between 0 and 65535, got {self.port}")
        if not self.timeout > 0:
            raise ConfigError(f"--timeout must be a positive number of seconds, got {self.timeout}")
        if any(not t.strip() for t in self.tokens):
            raise ConfigError("an empty --token is not allowed")
        if self.upstream_key is not None and not self.upstream_key.strip():  # `--upstream-key "$UNSET"`
            raise ConfigError("--upstream-key is empty (an unset variable?); leave it out to forward each client's key")
        for flag, value in (("--view-workers", self.view_workers), ("--max-views", self.max_views)):
            if value < 1:
                raise ConfigError(f"{flag} must be at least 1, got {value}")
        if any(o != "*" and not o.startswith(("http://", "https://")) for o in self.allow_origins):
            raise ConfigError("--allow-origin takes an origin such as https://app.example")
        check_bind(self.host, self.tokens)

    def allowed_host_names(self) -> frozenset[str] | None:
        """Host header names served (lowercase, no port); None: any (a wildcard bind or ``*``)."""
        if "*" in self.allow_hosts:
            return None
        wildcard = self.host in ("0.0.0.0", "::", "", "[::]")
        if wildcard and not self.allow_hosts:
            return None  # listening everywhere: a token is required, and any name may reach us
        names = {"localhost", "127.0.0.1", "::1", *(h.lower().strip("[]") for h in self.allow_hosts)}
        if not wildcard:
            names.add(self.host.lower().strip("[]"))
        return frozenset(names)

    @property
    def policy(self) -> Policy:
        return self.config.policy

    @property
    def spans(self) -> SpanPolicy:
        return self.config.spans

    @property
    def ledger(self) -> LedgerPolicy:
        return self.config.ledger

    def renderer(self) -> Renderer:
        """A renderer with the proxy's config (one per session view)."""
        return Renderer(self.config)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int) -> socket.socket:
    """The listening socket ``refold serve`` serves on, bound before the server starts: an address
    in use or a host that does not resolve is a ConfigError (uvicorn would log it and exit without
    a reason), and with ``--port 0`` the start line can name the port the system chose."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ConfigError(f"--host {host}: cannot resolve it ({e.strerror})") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        sock.bind(addr)
        sock.listen(2048)  # uvicorn's default backlog
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


def check_bind(host: str, tokens: tuple[str, ...]) -> None:
    if not is_loopback(host) and not tokens:
        raise ConfigError(
            f"refusing to listen on {host or repr(host) + ' (every address)'} without a bearer token: pass --token (or REFOLD_TOKENS), "
            "or bind 127.0.0.1"
        )


def redact(url: str) -> str:
    """``url`` with any password (or lone user token) replaced by ``***``, for logs and errors."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    if not parts.netloc or "@" not in parts.netloc:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, sep, _ = userinfo.partition(":")
    shown = f"{user}:***" if sep else "***"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{shown}@{hostport}"))


def _check_upstream(url: str) -> None:
    """A URL every request could be sent to: a host, no blanks, a port that is a number (else each
    request was a 502 saying the URL 'is missing an http:// protocol')."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is no number or out of range
    except ValueError as e:
        raise ConfigError(f"--upstream '{url}' is not a valid URL: {e}") from None
    if not parts.hostname:
        raise ConfigError(f"--upstream '{url}' names no host")
    if any(c.isspace() for c in url):
        raise ConfigError(f"--upstream '{url}' contains a blank")
