"""Integrations that run refold inside other agents, by configuration (never by patching them).

``refold.integrations.minisweagent.RefoldModel`` is the mini-swe-agent model wrapper (it needs
the ``mini`` extra); the YAML configs shipped next to this file turn it on for ``mini`` and
``mini-extra swebench``. Importing this package imports nothing heavy.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent
CONFIGS = {
    "mini": "refold_mini.yaml",
    "mini_textbased": "refold_mini_textbased.yaml",
    "swebench": "refold_swebench.yaml",
    "swebench_textbased": "refold_swebench_textbased.yaml",
}


def config_path(name: str) -> Path:
    """The shipped config called ``name`` (see ``CONFIGS``), or a ValueError listing them."""
    if name not in CONFIGS:
        raise ValueError(f"unknown config '{name}'; shipped configs: {', '.join(CONFIGS)}")
    return CONFIG_DIR / CONFIGS[name]


__all__ = ["CONFIGS", "CONFIG_DIR", "config_path"]
