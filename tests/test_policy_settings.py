"""What a user of the library meets: ``Policy``/``Config`` type-check without the pydantic mypy
plugin, and every invalid setting is one ``PolicyError`` line naming the field."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import refold
from refold import Config, Policy, PolicyError
from refold.config import BoundaryConfig, PromptConfig
from refold.mechanisms.ledger import LedgerPolicy
from refold.mechanisms.spans import SpanPolicy

GOOD = """
from refold import Config, Policy
from refold.config import BoundaryConfig
from refold.mechanisms.ledger import LedgerPolicy

p = Policy(k=3)
c = Config(policy=Policy(k=4, dedup=False), ledger=LedgerPolicy(budget_tokens=128_000))
b = BoundaryConfig(rule="fixed")
n: int = p.k + c.policy.k
m: int | None = c.policy.mask_after
print(n, m, b.rule, Config.parse(k=5).policy.k)
"""
BAD = """
from refold import Policy

Policy(k="3")
Policy(kk=3)
"""


def _mypy(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "user.py").write_text(code)
    # a user's own config: strict, and no pydantic plugin. Imports outside refold and pydantic are
    # not followed: pydantic's optional rich/numpy/IPython hooks were ~80% of the run (7 s -> 1.4 s)
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nstrict = True\nfollow_imports = skip\n"
        "[mypy-refold.*,pydantic.*,pydantic_core.*,typing_inspection.*,annotated_types.*]\nfollow_imports = normal\n"
    )
    env = {**os.environ, "MYPYPATH": str(Path(refold.__file__).parents[1])}
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", str(tmp_path / ".cache"), "user.py"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip


def test_policy_and_config_type_check_without_the_pydantic_plugin(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    good = _mypy(tmp_path, GOOD)
    assert good.returncode == 0, good.stdout
    bad = _mypy(tmp_path, BAD)
    assert bad.returncode == 1
    errors = [line for line in bad.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2 and "user.py:4:" in errors[0] and "user.py:5:" in errors[1], bad.stdout
    assert '"kk"' in errors[1]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Policy(k=0), "invalid policy field 'k': Input should be greater than or equal to 1"),
        (lambda: Policy(kk=1), "unknown policy field 'kk'; allowed: dedup, fold, chunk, k,"),
        (lambda: Policy(mask_after="soon"), "invalid policy field 'mask_after'"),
        (lambda: SpanPolicy(edit_chars=3), "invalid spans field 'edit_chars'"),
        (lambda: LedgerPolicy(budget_tokens=0), "invalid ledger field 'budget_tokens'"),
        (lambda: BoundaryConfig(rule="sometimes"), "invalid boundary field 'rule'"),
        (lambda: PromptConfig(format_in_system="maybe"), "invalid prompt field 'format_in_system'"),
        (lambda: Config(cache="azure"), "invalid config field 'cache'"),
        (lambda: Config(policy={"k": 0}), "invalid config field 'policy.k'"),
        (lambda: Config(spans={"nope": 1}), "unknown config field 'spans.nope'; allowed: enabled,"),
        (lambda: Config.parse(k="x"), "invalid config field 'policy.k'"),
        (lambda: Config().override(["boundary.remaining=0"]), "invalid config field 'boundary.remaining'"),
        (lambda: Policy.parse(k=1001), "invalid policy field 'k': Input should be less than or equal to 1000"),
    ],
)
def test_every_invalid_setting_is_one_line(build: Callable[[], object], message: str) -> None:
    with pytest.raises(PolicyError) as e:
        build()
    text = str(e.value)
    assert "\n" not in text and text.startswith(message), text


def test_valid_settings_still_build_and_nest() -> None:
    cfg = Config(policy=Policy(k=4), ledger=LedgerPolicy(budget_tokens=1000))
    assert cfg.policy.k == 4 and cfg.ledger.budget_tokens == 1000
    assert Config.parse(k=4) == cfg.replace(ledger=LedgerPolicy())
    assert Config.from_saved(cfg.saved()) == cfg
