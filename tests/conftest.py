"""Shared fixtures: paths to the real recorded runs shipped with the tests, and history builders."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def real_trajectories() -> list[Path]:
    """Real recorded runs shipped in the repo (tests/data and the package's demo run)."""
    files = sorted(p for p in DATA.iterdir() if ".traj" in p.name)
    demo = resources.files("refold") / "data" / "django__django-11477.traj.json.gz"
    return [*files, Path(str(demo))]


@pytest.fixture
def data_dir() -> Path:
    return DATA
