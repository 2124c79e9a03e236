"""Chronicle's Python dependencies, what each is for, and how to install one that is missing.

Invariant: this list and `plugin.yaml`'s `pip_dependencies` name the same requirements (a test
compares them). Only `pydantic_ai` is new next to Hermes, and it is imported only where a model
is called, so a plain Hermes can import, list and select the plugin before `hermes memory setup`
has installed it.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from dataclasses import dataclass

__all__ = ["Requirement", "REQUIREMENTS", "missing", "install_command", "requirement_for"]


@dataclass(frozen=True, slots=True)
class Requirement:
    module: str  # the import name
    spec: str  # the pip requirement
    needed_for: str
    optional: bool = False  # True: everything but `needed_for` works without it


REQUIREMENTS = (
    Requirement("pydantic", "pydantic>=2.10,<3", "events and settings"),
    Requirement(
        "pydantic_ai",
        "pydantic-ai-slim>=1.0",
        "model-written summaries (context.summarizer: auxiliary or endpoint)",
        optional=True,
    ),
    Requirement(
        "httpx",
        "httpx>=0.27",
        "sending to a summarizer endpoint or an embedding server (chronicle_engine/egress.py)",
        optional=True,
    ),
    Requirement("yaml", "pyyaml>=6.0", "reading config.yaml"),
    Requirement("croniter", "croniter>=2.0", "maintenance schedules"),
    Requirement("rich", "rich>=13", "the `chronicle` command's output"),
)


def missing() -> list[Requirement]:
    """The requirements this interpreter cannot import."""
    out = []
    for requirement in REQUIREMENTS:
        try:
            found = importlib.util.find_spec(requirement.module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(requirement)
    return out


def requirement_for(module_name: str | None) -> Requirement | None:
    """The requirement that provides `module_name` (a `ModuleNotFoundError.name`), if ours."""
    top = (module_name or "").split(".")[0]
    return next((r for r in REQUIREMENTS if r.module == top), None)


def install_command(requirements: list[Requirement]) -> str:
    """How to install `requirements` into the Python that runs Chronicle: Hermes' own setup
    installs every dependency of the plugin; pip names the exact interpreter."""
    specs = " ".join(shlex.quote(r.spec) for r in requirements)
    return f"`hermes memory setup chronicle`, or `{sys.executable} -m pip install {specs}`"
