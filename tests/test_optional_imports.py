"""The plugin imports, registers, captures and compacts without pydantic-ai installed.

A plain Hermes lists a memory provider in `hermes memory setup` only when its module imports,
and setup is the step that installs `pip_dependencies`: so the provider, the engine and the
extractive path must work before pydantic-ai is there. Each case runs in a fresh interpreter
in which importing `pydantic_ai` fails, as it does in a virtualenv holding only Hermes.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from plugin_support import LOAD_PLUGIN, fresh_interpreter

_BLOCK = textwrap.dedent(
    """
    import importlib.abc, sys

    class _NoPydanticAI(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "pydantic_ai" or name.startswith("pydantic_ai."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NoPydanticAI())
    """
)


def _run(body: str, tmp_path: Path, *, plugin: bool = False) -> dict:
    return fresh_interpreter(
        _BLOCK + (LOAD_PLUGIN if plugin else "") + textwrap.dedent(body), tmp_path
    )


def test_plugin_registers_compacts_and_reads_without_pydantic_ai(tmp_path):
    out = _run(
        f"""
        home = {str(tmp_path / "hermes_home")!r}
        provider.initialize("s1", hermes_home=home, platform="cli")
        engine.on_session_start("s1", hermes_home=home, platform="cli")
        engine.update_model(context_length=65536)
        messages = [{{"role": "system", "content": "sys"}}]
        for n in range(40):
            messages.append({{"role": "user", "content": f"question {{n}} " + "word " * 400}})
            messages.append({{"role": "assistant", "content": f"answer {{n}} " + "text " * 400}})
        provider.sync_turn("question 39", "answer 39", session_id="s1", messages=messages)
        out = engine.compress(messages[1:], current_tokens=60000, force=True)
        provider.shutdown()
        import contextlib, io
        from chronicle_engine.cli import main
        db = home + "/chronicle/chronicle.db"
        codes = []
        with contextlib.redirect_stdout(io.StringIO()):
            for argv in (["status"], ["search", "question"], ["sections"]):
                codes.append(main([*argv, "--db", db, "--hermes-home", home]))
        doctor = io.StringIO()
        with contextlib.redirect_stdout(doctor):
            codes.append(main(["doctor", "--json", "--db", db, "--hermes-home", home]))
        print(json.dumps({{
            "cli": codes,
            "doctor": [c for c in json.loads(doctor.getvalue())["checks"] if c["area"] == "python"],
            "compacted": len(out) < len(messages) - 1,
            "handoff": any("chronicle_expand" in str(m.get("content")) for m in out),
            "pydantic_ai_loaded": any(k.startswith("pydantic_ai") for k in sys.modules),
        }}))
        """,
        tmp_path,
        plugin=True,
    )
    # doctor may report 4 (the throwaway home selects neither slot); nothing fails to import.
    assert out["cli"][:3] == [0, 0, 0] and out["cli"][3] in (0, 4)
    (dependency,) = out["doctor"]
    assert dependency["name"] == "pydantic_ai" and dependency["status"] == "warn"
    assert "pydantic-ai-slim" in dependency["detail"]
    assert "hermes memory setup chronicle" in dependency["detail"]
    assert "-m pip install" in dependency["detail"]
    assert out == {**out, "compacted": True, "handoff": True, "pydantic_ai_loaded": False}


def test_a_model_summarizer_without_pydantic_ai_falls_back_to_extractive(tmp_path):
    out = _run(
        f"""
        import json
        from chronicle_engine.chronicle.writers import writer_from_config
        from chronicle_engine.config import Config
        from chronicle_engine.core import ChronicleCore
        core = ChronicleCore.get({str(tmp_path / "c.db")!r})
        config = Config({{"context": {{"summarizer": "auxiliary"}}}})
        writer = writer_from_config(config, core.store, core.types)
        core.shutdown()
        print(json.dumps({{"writer": writer.name}}))
        """,
        tmp_path,
    )
    assert out == {"writer": "extractive"}
