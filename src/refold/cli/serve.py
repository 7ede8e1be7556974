"""``refold serve --upstream URL``: an OpenAI-compatible proxy that folds every prompt.

Clients change their base URL to ``http://127.0.0.1:8077/v1``. Binding a non-loopback address
requires at least one ``--token`` (or ``REFOLD_TOKENS``, comma-separated); otherwise refold
refuses to start.
"""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from ..config import CACHE_PROFILES, DEFAULT, Config, profile_for
from ..errors import PolicyError
from ..proxy.config import DEFAULT_MAX_BODY, DEFAULT_PORT, ProxyConfig

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    upstream: Annotated[
        str, typer.Option(help="Upstream OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1.")
    ],
    host: Annotated[str, typer.Option(help="Address to bind; non-loopback needs --token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: one the system picks, named in the start line).")] = DEFAULT_PORT,
    cache: Annotated[
        str | None,
        typer.Option(help=f"Cache profile whose prices decide when the boundary moves: {', '.join(CACHE_PROFILES)} (default: from --upstream)."),
    ] = None,
    boundary: Annotated[str, typer.Option(help="Boundary rule: cost (move only when it pays) or fixed (the seed's, every k calls).")] = DEFAULT.boundary.rule,
    store: Annotated[
        str,
        typer.Option(help="Session store: a SQLite path / sqlite:///path (WAL), or redis://host:port/db."),
    ] = "refold-sessions.db",
    token: Annotated[
        list[str] | None, typer.Option(help="Bearer token clients must send (repeatable; each is a tenant).")
    ] = None,
    upstream_key: Annotated[
        str | None,
        typer.Option(envvar="REFOLD_UPSTREAM_KEY", help="API key sent upstream (default: the client's)."),
    ] = None,
    k: Annotated[int, typer.Option(help="Boundary step: act on history every k steps.")] = 3,
    dedup: Annotated[bool, typer.Option(help="Replace repeated outputs by stubs.")] = True,
    fold: Annotated[bool, typer.Option(help="Fold steps the model marks STALE.")] = True,
    chunk: Annotated[bool, typer.Option(help="Move the boundary only every k steps.")] = True,
    reversible: Annotated[bool, typer.Option(help="Allow restore (off: omissions are final).")] = True,
    protocol: Annotated[
        bool, typer.Option(help="Add the PROGRESS/STALE protocol to the system prompt.")
    ] = True,
    reminders: Annotated[
        bool, typer.Option(help="Remind the model when a reply lacks PROGRESS/STALE.")
    ] = True,
    mask_after: Annotated[int | None, typer.Option(help="Mask outputs this many steps behind the boundary (0: no masking).")] = DEFAULT.policy.mask_after,
    protect: Annotated[
        list[str] | None,
        typer.Option(help="Never hide outputs of these commands (repeatable): 'tool:NAME', 'path:GLOB' (a file read) or a command glob."),
    ] = None,
    spans: Annotated[bool, typer.Option(help="Span folding: begin_span / fold_span.")] = True,
    ledger: Annotated[
        bool, typer.Option(help="The object ledger: fold / drop / expand / search_ledger.")
    ] = True,
    span_prompt: Annotated[bool, typer.Option(help="Add the span section to the system prompt.")] = DEFAULT.spans.prompt,
    ledger_prompt: Annotated[bool, typer.Option(help="Add the ledger section to the system prompt.")] = DEFAULT.ledger.prompt,
    budget_tokens: Annotated[
        int | None, typer.Option(help="Show a 'context: N% of <budget>' line with new outputs.")
    ] = None,
    max_rounds: Annotated[int, typer.Option(help="Context-command rounds answered per request.")] = 3,
    context_tools: Annotated[
        bool, typer.Option(help="Offer the context commands as function tools when requests carry tools.")
    ] = True,
    context_tools_beside_shell: Annotated[
        bool,
        typer.Option(help="Offer them also next to a shell tool, whose calls carry context commands already."),
    ] = False,
    strip_protocol: Annotated[
        bool, typer.Option(help="Take the PROGRESS/STALE head out of replies shown to clients (history keeps it).")
    ] = False,
    max_body: Annotated[int, typer.Option(help="Largest accepted request body, bytes.")] = DEFAULT_MAX_BODY,
    timeout: Annotated[float, typer.Option(help="Upstream timeout, seconds.")] = 600.0,
    tokenizer: Annotated[
        str, typer.Option(help="Tokenizer for the tokens-saved metric (qwen3.6, o200k, chars4, off).")
    ] = "qwen3.6",
    require_key: Annotated[
        bool, typer.Option(help="Refuse requests without an API key (else they share one anonymous owner).")
    ] = False,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(help="Host name to serve besides loopback and --host (repeatable; '*' for any)."),
    ] = None,
    allow_origin: Annotated[
        list[str] | None,
        typer.Option(help="Browser origin allowed to call, e.g. https://app.example (repeatable)."),
    ] = None,
    view_workers: Annotated[int, typer.Option(help="Processes that build session HTML views.")] = 1,
    max_views: Annotated[int, typer.Option(help="Session views building or queued at once.")] = 8,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Serve an OpenAI-compatible proxy that renders folded prompts (sessions are durable)."""
    tokens = tuple(token or ()) + tuple(
        t for t in os.environ.get("REFOLD_TOKENS", "").split(",") if t.strip()
    )
    config = from_flags(
        upstream=upstream, cache=cache, boundary=boundary, k=k, dedup=dedup, fold=fold, chunk=chunk,
        reversible=reversible, protocol=protocol, reminders=reminders, mask_after=mask_after, spans=spans,
        protect=tuple(protect or ()),
        span_prompt=span_prompt, ledger=ledger, ledger_prompt=ledger_prompt, budget_tokens=budget_tokens,
        tokenizer=tokenizer,
    )
    cfg = ProxyConfig(
        upstream=upstream,
        store=store,
        host=host,
        port=port,
        tokens=tokens,
        upstream_key=upstream_key,
        config=config,
        max_rounds=max_rounds,
        strip_protocol=strip_protocol,
        context_tools=context_tools,
        context_tools_beside_shell=context_tools_beside_shell,
        max_body=max_body,
        timeout=timeout,
        require_key=require_key,
        allow_hosts=tuple(allow_host or ()),
        allow_origins=tuple(allow_origin or ()),
        view_workers=view_workers,
        max_views=max_views,
    )
    if log_level.lower() not in LOG_LEVELS:
        raise PolicyError(f"unknown --log-level {log_level!r}; valid choices: {', '.join(LOG_LEVELS)}")
    import uvicorn

    from ..proxy.app import create_app
    from ..proxy.config import listen, redact
    from ..proxy.store import check_store, store_where

    check_store(store)
    sock = listen(host, port)
    bound = sock.getsockname()[1]  # --port 0: the port the system chose
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host  # an IPv6 address in a URL
    typer.echo(f"refold serve: http://{shown}:{bound}/v1 -> {redact(upstream)} (store {redact(store_where(store))})", err=True)
    if urllib.parse.urlsplit(upstream).path.strip("/") == "":  # every request was a bare upstream 404
        typer.echo(
            f"refold serve: note: --upstream has no path, so a client's /v1/chat/completions goes to "
            f"{redact(upstream.rstrip('/'))}/chat/completions; OpenAI-compatible servers usually want .../v1",
            err=True,
        )
    try:
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(cfg),
                host=host,
                port=bound,
                log_level=log_level.lower(),
                timeout_graceful_shutdown=5,
                timeout_keep_alive=75,
            )
        )
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:  # the app's startup failed (uvicorn.run exits the same way)
        raise SystemExit(3)


def from_flags(
    *,
    upstream: str | None = None,
    cache: str | None = None,
    boundary: str | None = None,
    spans: bool = True,
    span_prompt: bool | None = None,
    ledger: bool = True,
    ledger_prompt: bool | None = None,
    budget_tokens: int | None = None,
    tokenizer: str | None = None,
    **policy: Any,
) -> Config:
    """The Config the flags of ``refold serve`` give: the library's defaults
    unless a flag says otherwise. ``policy`` takes Policy fields (``k``, ``dedup``, ...);
    ``mask_after=0`` turns masking off; ``--no-spans`` / ``--no-ledger`` switch their prompt
    sections off too; the cache profile defaults to the upstream's. An invalid value is one
    PolicyError line naming the flag."""
    data: dict[str, Any] = {"policy": dict(policy)}
    if "mask_after" in policy:
        data["policy"]["mask_after"] = policy["mask_after"] or None
    span_prompt = DEFAULT.spans.prompt if span_prompt is None else span_prompt
    ledger_prompt = DEFAULT.ledger.prompt if ledger_prompt is None else ledger_prompt
    data["spans"] = {"enabled": spans, "prompt": spans and span_prompt}
    data["ledger"] = {"enabled": ledger, "prompt": ledger and ledger_prompt, "budget_tokens": budget_tokens}
    if boundary is not None:
        data["boundary"] = {"rule": boundary}
    if cache is not None or upstream is not None:
        data["cache"] = cache or profile_for(upstream or "")
    if tokenizer is not None:
        data["tokenizer"] = tokenizer
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(p) for p in err.get("loc", ())]
        name = loc[-1] if loc else "config"
        if loc[:1] == ["boundary"]:
            name = "boundary"
        elif loc[:2] == ["policy", "protect"]:
            name = "protect"
        elif loc[:1] == ["spans"] and name == "enabled":
            name = "spans"
        elif loc[:1] == ["ledger"] and name == "enabled":
            name = "ledger"
        raise PolicyError(f"--{name.replace('_', '-')}: {err.get('msg', 'invalid value')}") from None
