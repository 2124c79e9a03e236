"""Shared set-up for the compaction tests (no tests of its own): cores on real stores, the
plugin loaded the way Hermes loads it, and scripted conversations."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from chronicle_engine.core import ChronicleCore

ROOT = Path(__file__).resolve().parents[1]


def wire(message: dict[str, Any]) -> dict[str, Any]:
    """The message as the log keeps it: without the host's private `_` keys."""
    return {k: v for k, v in message.items() if not str(k).startswith("_")}


def core_for(path: Any, config: Any = None) -> ChronicleCore:
    """A core on `path` (":memory:" or a WAL file), with the real capture and session tree."""
    if str(path) == ":memory:":
        return ChronicleCore(path, config)
    return ChronicleCore.get(path, config=config)


def load_plugin() -> Any:
    """The repo root imported as a package, the way Hermes' loaders import the plugin."""
    name = "chronicle_plugin_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "__init__.py", submodule_search_locations=[str(ROOT)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_bench(name: str) -> Any:
    """bench/<name>.py as a module (the benches are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(
        f"chronicle_bench_{name}", ROOT / "bench" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def slots() -> tuple[Any, Any]:
    """The two slots as Hermes' two loaders register them: (context engine, memory provider)."""
    plugin = load_plugin()
    engines: list[Any] = []
    providers: list[Any] = []

    class GeneralLoader:
        def register_context_engine(self, engine: Any) -> None:
            engines.append(engine)

    class MemoryLoader:
        def register_memory_provider(self, provider: Any) -> None:
            providers.append(provider)

    plugin.register(GeneralLoader())
    plugin.register(MemoryLoader())
    return engines[0], providers[0]


@contextlib.contextmanager
def hermes_slots(
    window: int, session: str, compression: dict[str, Any] | None = None
) -> Iterator[tuple[Any, Any]]:
    """Both slots in a throwaway HERMES_HOME (config.yaml selecting Chronicle, with `compression`
    if given, else none: out of the box), set up as Hermes sets them up: the provider
    initialised, the engine deep-copied for the agent, given its window and the session.
    Yields (engine, provider); shuts the provider down and restores HERMES_HOME after."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "hermes_home"
        home.mkdir()
        config: dict[str, Any] = {
            "memory": {"provider": "chronicle"},
            "context": {"engine": "chronicle"},
        }
        if compression is not None:
            config["compression"] = compression
        (home / "config.yaml").write_text(yaml.safe_dump(config))
        previous_home = os.environ.get("HERMES_HOME")
        os.environ["HERMES_HOME"] = str(home)
        registered, provider = slots()
        try:
            provider.initialize(session, hermes_home=str(home), platform="cli")
            engine = copy.deepcopy(registered)  # Hermes copies the engine for each agent
            engine.update_model(model="bench", context_length=window)
            engine.on_session_start(session, hermes_home=str(home), platform="cli")
            yield engine, provider
        finally:
            provider.shutdown()
            if previous_home is None:
                os.environ.pop("HERMES_HOME", None)
            else:
                os.environ["HERMES_HOME"] = previous_home


def rotate(engine: Any, switch: Any, old: str, new: str, messages: list[Any]) -> str:
    """What Hermes does after a compaction that rotates the session: both slots end the old
    session, the engine starts the new one, and the memory side hears the switch (`switch`: the
    provider, or Hermes' MemoryManager). Returns the new session id."""
    engine.on_session_end(old, messages)
    if hasattr(switch, "on_session_end"):
        switch.on_session_end(messages)
    engine.on_session_start(new, old_session_id=old, boundary_reason="compression")
    switch.on_session_switch(new, parent_session_id=old, reason="compression")
    return new


def tool_step(call: str, command: str, output: str) -> list[dict[str, Any]]:
    """An assistant's terminal call `call` running `command`, and its result."""
    arguments = json.dumps({"command": command})
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "terminal", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call, "content": output},
    ]


def conversation(
    turns: int, *, tool_every: int = 2, size: int = 400, instructions: dict[int, str] | None = None
) -> list[dict[str, Any]]:
    """A scripted chat: user requests, assistant replies, tool calls with results."""
    instructions = instructions or {}
    filler = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    out: list[dict[str, Any]] = []
    for t in range(turns):
        out.append(
            {
                "role": "user",
                "content": instructions.get(t, f"request {t}: please look at item-{t}. {filler}"),
            }
        )
        if tool_every and t % tool_every == 0:
            call = f"call_{t}"
            out.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {
                                "name": "terminal",
                                "arguments": json.dumps({"command": f"cat /srv/app/file-{t}.txt"}),
                            },
                        }
                    ],
                }
            )
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call,
                    "content": f"exit 0\nresult {t}: value {1000 + t}\n{filler}",
                }
            )
        out.append(
            {"role": "assistant", "content": f"Answer {t}: decided to keep item-{t}. {filler}"}
        )
    return out
