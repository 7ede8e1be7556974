"""The lab: what measures refold rather than what refold is.

Replay of recorded runs (`replay`), prefix-cache simulators (`cache`), the many-sessions
server simulation (`serversim`) and the HTML viewer (`viewer`). The core (history, config,
render, mechanisms) never imports from here; the CLI and the proxy's session view do.
"""
