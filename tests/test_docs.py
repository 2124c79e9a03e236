"""The README's generated blocks (config reference, command list) match the code."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_generated_blocks_are_current() -> None:
    generate = _generator()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert generate.render(readme) == readme, "README.md is stale: run `python docs/generate.py`"


def test_every_config_key_is_in_the_readme() -> None:
    from chronicle_engine.config import KEYS

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(f"`{k.path}`" in readme for k in KEYS)
