"""Loading the plugin costs Hermes little: the slots import the engine where it is first used.

Hermes imports every installed plugin at start-up, whether or not its slots are selected, so
`register()` builds the provider and the context engine without the store, the settings' models
or yaml; `initialize()` (and a session's start, a tool, setup) imports them. Each case runs in a
fresh interpreter, where those imports really happen for the first time.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from plugin_support import LOAD_PLUGIN, ROOT, fresh_interpreter

_HEAVY = """
import threading
HEAVY = ("chronicle_engine.core", "chronicle_engine.config", "chronicle_engine.log.events",
         "chronicle_engine.sessions.capture", "yaml")
loaded_at_register = sorted(m for m in HEAVY if m in sys.modules)
home = {home!r}
turn = [{{"role": "user", "content": "What did we decide about the backups?"}},
        {{"role": "assistant", "content": "Nightly, kept for thirty days."}}]
"""


def _run(body: str, tmp_path: Path, *, before: str = "", config: str = "") -> dict:
    home = tmp_path / "hermes_home"
    home.mkdir()
    if config:
        (home / "config.yaml").write_text(config, encoding="utf-8")
    script = (
        textwrap.dedent(before)
        + LOAD_PLUGIN
        + _HEAVY.format(home=str(home))
        + textwrap.dedent(body)
    )
    return fresh_interpreter(script, tmp_path)


_BROKEN = """
import importlib.abc, sys

class Broken(importlib.abc.MetaPathFinder):  # as a damaged install would fail
    def find_spec(self, name, path=None, target=None):
        if name == "chronicle_engine.core":
            raise ImportError("chronicle_engine.core is damaged")
        return None

broken = Broken()
sys.meta_path.insert(0, broken)
"""


def test_register_imports_no_store_and_two_threads_share_the_first_use(tmp_path):
    out = _run(
        """
        errors = []
        start = threading.Barrier(2)
        def first(call):
            start.wait()
            try:
                call()
            except BaseException as exc:
                errors.append(repr(exc))
        threads = [
            threading.Thread(target=first, args=(lambda: provider.initialize(
                "s1", hermes_home=home, platform="cli"),)),
            threading.Thread(target=first, args=(lambda: engine.on_session_start(
                "s1", hermes_home=home, platform="cli"),)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        provider.sync_turn(turn[0]["content"], turn[1]["content"], session_id="s1",
                           messages=turn)
        found = provider.handle_tool_call("chronicle_search", {"query": "backups"})
        provider.shutdown()
        print(json.dumps({
            "at_register": loaded_at_register,
            "after_use": sorted(m for m in HEAVY if m in sys.modules),
            "errors": errors,
            "found": "thirty days" in found,
        }))
        """,
        tmp_path,
    )
    assert out["at_register"] == []
    assert out["after_use"] == sorted(
        [
            "chronicle_engine.core",
            "chronicle_engine.config",
            "chronicle_engine.log.events",
            "chronicle_engine.sessions.capture",
            "yaml",
        ]
    )
    assert out["errors"] == [] and out["found"] is True


@pytest.mark.parametrize(
    ("config", "registered"),
    [
        ("context:\n  engine: chronicle\nmemory:\n  provider: chronicle\n", []),
        ("context:\n  engine: chronicle\n", ["provider"]),
        ("memory:\n  provider: chronicle\n", ["engine"]),
    ],
)
def test_a_selected_slot_that_will_not_import_is_not_registered(tmp_path, config, registered):
    # Hermes then keeps its own compressor or memory (and says so), instead of a slot that
    # never compacts, or keeps no turn, because each hook fails behind the fence. A slot the
    # config does not select registers as before: it costs nothing until it is used.
    out = _run(
        """
        print(json.dumps({"registered": sorted(collector.got)}))
        """,
        tmp_path,
        before=_BROKEN,
        config=config,
    )
    assert out == {"registered": registered}


def test_a_slot_selected_by_the_administrators_managed_config_is_checked_too(tmp_path):
    # Hermes reads an administrator's managed config.yaml over the user's; inside Hermes (its
    # config module loaded) the plugin asks Hermes, so a slot selected there is selected.
    managed = tmp_path / "managed"
    managed.mkdir()
    (managed / "config.yaml").write_text(
        "memory:\n  provider: chronicle\ncontext:\n  engine: chronicle\n", encoding="utf-8"
    )
    host = f"import os\nos.environ['HERMES_MANAGED_DIR'] = {str(managed)!r}\nimport hermes_cli.config\n"
    out = _run(
        """
        print(json.dumps({"registered": sorted(collector.got)}))
        """,
        tmp_path,
        before=host + _BROKEN,
        config="display:\n  compact: true\n",
    )
    assert out == {"registered": []}


def _lazy_imports(tree: ast.AST) -> set[tuple[str, str]]:
    return {
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("chronicle_engine")
        for alias in node.names
    }


@pytest.mark.parametrize(
    ("module", "slot"),
    [("provider.py", "ChronicleMemoryProvider"), ("context.py", "ChronicleContextEngine")],
)
def test_a_slots_load_imports_everything_its_hooks_import_on_first_use(module, slot):
    # load() is what register() tries for a selected slot: a hook's import it misses would
    # fail only later, behind the fence.
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    at_top = {
        (node.module, alias.name)
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    in_functions = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name != "load":
            in_functions |= _lazy_imports(node)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == slot)
    load = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "load")
    missing = in_functions - at_top - _lazy_imports(load)
    assert in_functions and not missing, sorted(missing)


def test_a_provider_that_will_not_import_at_first_use_stays_behind_the_fence(tmp_path):
    out = _run(
        """
        calls = {
            "initialize": lambda: provider.initialize("s1", hermes_home=home, platform="cli"),
            "sync_turn": lambda: provider.sync_turn(
                turn[0]["content"], turn[1]["content"], session_id="s1", messages=turn),
            "prefetch": lambda: provider.prefetch("backups", session_id="s1"),
            "tools": lambda: provider.handle_tool_call("chronicle_search", {"query": "x"}),
        }
        answers = {}
        for name, call in calls.items():
            try:
                answers[name] = repr(call())
            except BaseException as exc:
                answers[name] = "raised " + repr(exc)
        sys.meta_path.remove(broken)  # repaired: the next start opens the store
        provider.initialize("s1", hermes_home=home, platform="cli")
        provider.sync_turn(turn[0]["content"], turn[1]["content"], session_id="s1",
                           messages=turn)
        found = provider.handle_tool_call("chronicle_search", {"query": "backups"})
        provider.shutdown()
        print(json.dumps({"answers": answers, "found": "thirty days" in found}))
        """,
        tmp_path,
        before=_BROKEN,
    )
    answers = out["answers"]
    assert not [name for name, said in answers.items() if said.startswith("raised")], answers
    assert answers["initialize"] == answers["sync_turn"] == "None"
    assert answers["prefetch"] == "''"
    assert "unavailable" in answers["tools"]
    assert out["found"] is True


def test_what_a_selected_plugin_never_needs_in_an_english_chat_it_never_builds(tmp_path):
    # register() imports both selected slots' engines; a model's event loop, the CJK classes
    # and the date patterns wait for the first call that needs them, which two host threads
    # may make at once.
    out = _run(
        """
        from chronicle_engine.recall import text, when
        def built():
            return {"asyncio": "asyncio" in sys.modules, "cjk": text._cjk.cache_info().currsize,
                    "dates": when._patterns.cache_info().currsize}
        at_register = built()
        provider.initialize("s1", hermes_home=home, platform="cli")
        provider.sync_turn(turn[0]["content"], turn[1]["content"], session_id="s1",
                           messages=turn)
        english = provider.handle_tool_call("chronicle_search", {"query": "backups"})
        after_english = built()
        cjk = [{"role": "user", "content": "我们把柜子搬到了第6号房间"},
               {"role": "assistant", "content": "好的，柜子在第6号房间。"}]
        provider.sync_turn(cjk[0]["content"], cjk[1]["content"], session_id="s1",
                           messages=turn + cjk)
        start = threading.Barrier(4)
        answers = []
        def ask(query):
            start.wait()
            answers.append((query, provider.handle_tool_call("chronicle_search",
                                                             {"query": query})))
        queries = ["柜子", "柜子", "backups in December 2026", "backups in December 2026"]
        threads = [threading.Thread(target=ask, args=(q,)) for q in queries]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        provider.shutdown()
        by_query = {}
        for query, answer in answers:
            by_query.setdefault(query, set()).add(answer)
        print(json.dumps({"at_register": at_register, "after_english": after_english,
                          "english": "thirty days" in english, "after": built(),
                          "cjk": sorted(by_query["柜子"])[0],
                          "one_answer_each": all(len(a) == 1 for a in by_query.values())}))
        """,
        tmp_path,
        config="context:\n  engine: chronicle\nmemory:\n  provider: chronicle\n",
    )
    nothing = {"asyncio": False, "cjk": 0, "dates": 0}
    assert out["at_register"] == nothing and out["after_english"] == nothing
    assert out["english"] is True
    assert out["after"] == {"asyncio": False, "cjk": 1, "dates": 1}
    assert out["one_answer_each"] is True
    assert "第6号房间" in out["cjk"], out["cjk"]
