"""refold: render a shorter prompt from an agent's full, append-only history before every call.

    from refold import Config, Renderer, load
    history = load("run.traj.json")
    prompt = Renderer(Config.parse(k=3)).render(history)   # prompt.messages, prompt.origins, prompt.stats
"""

from .config import Config
from .errors import CommandError, PolicyError, RefoldError, TrajectoryError
from .history import History
from .loaders import load
from .policy import Policy
from .prompts import response_format_lines, system_section
from .protocol import parse_command, parse_head
from .render import Renderer
from .restore import restore_text
from .types import Action, Origin, Rendered, RenderStats, Shown, Step

__version__ = "0.1.0"

__all__ = [
    "Action",
    "CommandError",
    "Config",
    "History",
    "Origin",
    "Policy",
    "PolicyError",
    "RefoldError",
    "RenderStats",
    "Rendered",
    "Renderer",
    "Shown",
    "Step",
    "TrajectoryError",
    "load",
    "parse_command",
    "parse_head",
    "response_format_lines",
    "restore_text",
    "system_section",
]
