"""The installed package must carry every subpackage of chronicle_engine/ (a wheel only holds listed ones)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_engine_subpackage_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        "chronicle_engine" + ".".join(["", *p.parent.relative_to(ROOT / "chronicle_engine").parts])
        for p in (ROOT / "chronicle_engine").rglob("__init__.py")
    }
    assert found == listed, f"add to pyproject [tool.setuptools] packages: {sorted(found - listed)}"


def test_plugin_manifest_is_standalone() -> None:
    import yaml

    manifest = yaml.safe_load((ROOT / "plugin.yaml").read_text())
    # Without kind: standalone Hermes treats the plugin as memory-only and never registers the
    # context engine, silently falling back to its built-in compressor.
    assert manifest["kind"] == "standalone"
    assert manifest["name"] == "chronicle"
    assert manifest["manifest_version"] == 1


def test_dependency_list_matches_plugin_yaml_and_pyproject() -> None:
    """doctor's dependency check, Hermes' setup (plugin.yaml) and pip (pyproject) agree."""
    import yaml

    from chronicle_engine.deps import REQUIREMENTS

    ours = sorted(r.spec for r in REQUIREMENTS)
    manifest = yaml.safe_load((ROOT / "plugin.yaml").read_text())
    assert sorted(manifest["pip_dependencies"]) == ours
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert sorted(pyproject["project"]["dependencies"]) == ours
