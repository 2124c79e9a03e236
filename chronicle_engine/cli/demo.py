"""`chronicle demo`: the main job, offline, in seconds, through the real plugin.

Invariant: the demo is a small host that calls the plugin the way Hermes 0.19.0 does, in the
same order (register with both loaders' contexts, deepcopy the engine, update_model,
on_session_start, initialize, then per turn on_turn_start / prefetch / should_compress / compress /
update_from_response / sync_turn / queue_prefetch, and the compaction boundary: on_session_end on
both slots, a new session id, on_session_start(boundary_reason="compression") and
on_session_switch(reason="compression")). It keeps every message it sent, so the expand at the
end is checked byte for byte against what the host really held.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

import yaml
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from ..capture.events import HANDOFF_MARKER
from .app import CommandFailed, Exit, Outcome, Session
from .demo_chat import NEEDLE, NEEDLE_QUERY, turns

if TYPE_CHECKING:
    from ..chronicle.sections import Section

__all__ = ["run_demo"]

CONTEXT_LENGTH = 65_536
HANDOFF_LINES = 14
SYSTEM_PROMPT = "You are Hermes Agent. " * 200  # stands in for Hermes' own system prompt
COMPRESSION = {"threshold": 0.75, "target_ratio": 0.25, "protect_first_n": 1, "protect_last_n": 6}


def _tokens(messages: list[dict[str, object]]) -> int:
    return (len(SYSTEM_PROMPT) + len(json.dumps(messages, ensure_ascii=False))) // 4


def load_plugin() -> ModuleType:
    """The plugin package from this checkout, imported as Hermes' general loader imports it."""
    import chronicle_engine

    root = Path(chronicle_engine.__file__).resolve().parent.parent
    if not (root / "plugin.yaml").exists() or not (root / "__init__.py").exists():
        raise CommandFailed(
            "the demo runs the plugin's own adapters, which live at the root of a Chronicle "
            "checkout; install it editable from a clone (pip install -e .) and run it again",
            Exit.FAILED,
        )
    name = "chronicle_demo_plugin"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, root / "__init__.py", submodule_search_locations=[str(root)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class _ToolSlot(Protocol):
    def handle_tool_call(self, name: str, args: dict[str, object], /, **kwargs: object) -> str: ...


class MemorySlot(_ToolSlot, Protocol):
    """What the demo calls on the plugin's memory provider, in Hermes' order."""

    def initialize(self, session_id: str, /, **kwargs: object) -> None: ...
    def on_turn_start(self, turn_number: int, message: str, /) -> None: ...
    def prefetch(self, query: str, /, *, session_id: str = "") -> str: ...
    def sync_turn(
        self,
        user_content: str,
        assistant_content: str,
        /,
        *,
        session_id: str = "",
        messages: list[dict[str, object]] | None = None,
    ) -> None: ...
    def queue_prefetch(self, query: str, /, *, session_id: str = "") -> None: ...
    def on_session_end(self, messages: list[dict[str, object]], /) -> None: ...
    def on_session_switch(self, new_session_id: str, /, **kwargs: object) -> None: ...


class ContextSlot(_ToolSlot, Protocol):
    """What the demo calls on the plugin's context engine, in Hermes' order."""

    def update_model(self, **kwargs: object) -> None: ...
    def on_session_start(self, session_id: str, /, **kwargs: object) -> None: ...
    def should_compress(self, prompt_tokens: int, /) -> bool: ...
    def compress(
        self, messages: list[dict[str, object]], /, *, current_tokens: int
    ) -> list[dict[str, object]]: ...
    def on_session_end(self, session_id: str, messages: list[dict[str, object]], /) -> None: ...
    def update_from_response(self, usage: dict[str, int], /) -> None: ...


class _Slots:
    """Both loaders' registration surfaces at once."""

    def __init__(self) -> None:
        self.provider: MemorySlot | None = None
        self.engine: ContextSlot | None = None

    def register_memory_provider(self, provider: MemorySlot) -> None:
        self.provider = provider

    def register_context_engine(self, engine: ContextSlot) -> None:
        self.engine = engine


@dataclass
class Compaction:
    turn: int
    old_session: str
    new_session: str
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int


@dataclass
class DemoHost:
    home: Path
    provider: MemorySlot
    engine: ContextSlot
    session_id: str = "demo_0001"
    messages: list[dict[str, object]] = field(default_factory=list)
    sent: list[dict[str, object]] = field(default_factory=list)  # every message, as first held
    compactions: list[Compaction] = field(default_factory=list)
    prefetched: list[tuple[int, str]] = field(default_factory=list)
    calls: list[dict[str, object]] = field(default_factory=list)  # one per model call
    _sessions: int = 1
    _turn: int = 0

    def start(self) -> None:
        self.engine.update_model(
            model="demo-model",
            context_length=CONTEXT_LENGTH,
            base_url="",
            api_key="",
            provider="demo",
            api_mode="chat_completions",
        )
        self.engine.on_session_start(
            self.session_id,
            hermes_home=str(self.home),
            platform="cli",
            model="demo-model",
            context_length=CONTEXT_LENGTH,
            conversation_id=None,
        )
        self.provider.initialize(
            self.session_id, hermes_home=str(self.home), platform="cli", agent_context="primary"
        )

    def _append(self, message: dict[str, object]) -> None:
        self.sent.append(copy.deepcopy(message))
        self.messages.append(message)

    def _maybe_compress(self, turn: int, tokens: int) -> None:
        if not self.engine.should_compress(tokens):
            return
        before = list(self.messages)
        compressed = self.engine.compress(copy.deepcopy(before), current_tokens=tokens)
        if not compressed or compressed == before:
            return
        self.provider.on_session_end(before)
        self.engine.on_session_end(self.session_id, before)
        old = self.session_id
        self._sessions += 1
        self.session_id = f"demo_{self._sessions:04d}"
        self.messages = compressed
        self.engine.on_session_start(
            self.session_id,
            boundary_reason="compression",
            old_session_id=old,
            platform="cli",
            conversation_id=None,
        )
        self.provider.on_session_switch(
            self.session_id, parent_session_id=old, reset=False, reason="compression"
        )
        self.compactions.append(
            Compaction(
                turn,
                old,
                self.session_id,
                len(before),
                len(compressed),
                tokens,
                _tokens(compressed),
            )
        )

    def _respond(self, prompt_tokens: int, text: str) -> None:
        self.calls.append(
            {
                "turn": self._turn,
                "tokens": prompt_tokens,
                "uncompacted_tokens": _tokens(self.sent),
                "compacted": bool(self.compactions and self.compactions[-1].turn == self._turn),
            }
        )
        completion = max(1, len(text) // 4)
        self.engine.update_from_response(
            {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
            }
        )

    def turn(
        self,
        number: int,
        user: dict[str, object],
        steps: tuple[dict[str, object], ...],
        answer: dict[str, object],
    ) -> None:
        text = str(user["content"])
        self._turn = number
        self.provider.on_turn_start(number, text)
        recalled = self.provider.prefetch(text, session_id="")
        if recalled:
            self.prefetched.append((number, recalled))
        self._append(user)
        self._maybe_compress(number, _tokens(self.messages))
        for step in steps:
            if step["role"] == "assistant":
                self._respond(_tokens(self.messages), "")
            self._append(step)
        self._maybe_compress(number, _tokens(self.messages))
        said = str(answer["content"])
        self._respond(_tokens(self.messages), said)
        self._append(answer)
        self.provider.sync_turn(text, said, session_id=self.session_id, messages=self.messages)
        self.provider.queue_prefetch(text, session_id=self.session_id)

    def tool(
        self, slot: _ToolSlot, name: str, args: dict[str, object], **kwargs: object
    ) -> dict[str, object]:
        answer = json.loads(slot.handle_tool_call(name, args, **kwargs))
        return answer if isinstance(answer, dict) else {"error": f"{name} answered {answer!r}"}

    def expand(self, section_id: str) -> list[dict[str, object]]:
        """The agent's own tool, through the engine, every page of it (bounded)."""
        messages: list[dict[str, object]] = []
        page = 1
        for _ in range(1000):
            result = self.tool(
                self.engine,
                "chronicle_expand",
                {"section_id": section_id, "page": page, "page_size": 200},
                messages=self.messages,
            )
            if "error" in result:
                raise CommandFailed(f"chronicle_expand failed: {result['error']}", Exit.FAILED)
            returned = result.get("messages", [])
            for m in returned if isinstance(returned, list) else []:
                messages.append(m["message"])
            nxt = result.get("next")
            if not isinstance(nxt, dict) or not nxt:
                break
            page = int(nxt["page"])
        return messages


def run_demo(s: Session) -> Outcome:
    keep = getattr(s.args, "db", None)
    if keep and Path(keep).expanduser().exists() and not getattr(s.args, "force", False):
        raise CommandFailed(
            f"{keep} already exists. The demo appends 248 synthetic events, and a Chronicle log "
            "never deletes: pick a new file (chronicle demo --db demo.db), or add --force if "
            "you really want them in this database",
            Exit.USAGE,
        )
    work = Path(tempfile.mkdtemp(prefix="chronicle-demo-"))
    db = Path(keep).expanduser().resolve() if keep else work / "chronicle" / "chronicle.db"
    # Hermes runs with HERMES_HOME set; the demo sets a throwaway one, never touching ~/.hermes.
    saved = os.environ.get("HERMES_HOME")
    os.environ["HERMES_HOME"] = str(work)
    try:
        return _run(s, work, db, db if keep else None)
    finally:
        from ..core import ChronicleCore

        for core in ChronicleCore.open_cores():
            path = Path(core.db_path)
            if path.is_relative_to(work) or path == db:
                core.shutdown()
        if saved is None:
            os.environ.pop("HERMES_HOME", None)
        else:
            os.environ["HERMES_HOME"] = saved
        shutil.rmtree(work, ignore_errors=True)


def _run(s: Session, home: Path, db: Path, kept: Path | None) -> Outcome:
    host = _chat(home, db)
    seen = _Findings.of(host, db)
    return Outcome(seen.data(), lambda console: seen.draw(console, kept), seen.exit())


def _chat(home: Path, db: Path) -> DemoHost:
    """The scripted chat, through the plugin registered as Hermes registers it."""
    (home / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "memory": {"provider": "chronicle"},
                "context": {"engine": "chronicle"},
                "plugins": {"enabled": ["chronicle"]},
                "compression": COMPRESSION,
                "chronicle": {"db_path": str(db)},
            }
        ),
        encoding="utf-8",
    )
    plugin = load_plugin()
    slots = _Slots()
    plugin.register(slots)
    if slots.provider is None or slots.engine is None:
        raise CommandFailed(
            "this build's plugin did not register both slots (memory provider and context "
            "engine); the demo needs both",
            Exit.FAILED,
        )
    host = DemoHost(home, slots.provider, copy.deepcopy(slots.engine))
    host.start()
    for t in turns():
        host.turn(t.number, t.user, t.steps, t.answer)
    return host


@dataclass
class _Findings:
    """What the chat left, looked at through the agent's own tools and the log."""

    host: DemoHost
    lineage: list[str]
    chronicle_name: str
    sections: list[Section]
    handoff: dict[str, object] | None
    hits: list[dict[str, object]]
    needle_found: bool
    restored: list[str]
    identical: bool

    @classmethod
    def of(cls, host: DemoHost, db: Path) -> _Findings:
        from ..core import ChronicleCore

        core = ChronicleCore.get(db)
        chronicle_name = core.sessions.chronicle_name(host.session_id)
        sections = core.chronicle(chronicle_name).current()
        handoff = next(
            (m for m in host.messages if str(m.get("content") or "").startswith(HANDOFF_MARKER)),
            None,
        )
        # The agent's own search tool, through the memory provider, as the model would call it.
        found = host.tool(host.provider, "chronicle_search", {"query": NEEDLE_QUERY, "limit": 3})
        if "error" in found:
            raise CommandFailed(f"chronicle_search failed: {found['error']}", Exit.FAILED)
        results = found.get("results")
        hits = [h for h in results if isinstance(h, dict)] if isinstance(results, list) else []
        expanded = host.expand(sections[0].anchor.section_id) if sections else []
        originals = [json.dumps(m, ensure_ascii=False) for m in host.sent]
        restored = [json.dumps(m, ensure_ascii=False) for m in expanded]
        identical = bool(restored) and any(
            originals[i : i + len(restored)] == restored
            for i in range(len(originals) - len(restored) + 1)
        )
        needle = NEEDLE.split("vault path is ")[1].rstrip(".")
        return cls(
            host=host,
            lineage=core.sessions.lineage(host.session_id),
            chronicle_name=chronicle_name,
            sections=sections,
            handoff=handoff,
            hits=hits,
            needle_found=any(needle in json.dumps(h, ensure_ascii=False) for h in hits),
            restored=restored,
            identical=identical,
        )

    @property
    def shown_section(self) -> str | None:
        return self.sections[0].anchor.section_id if self.sections else None

    def exit(self) -> Exit:
        ok = (
            len(self.host.compactions) >= 2
            and self.handoff is not None
            and self.identical
            and bool(self.sections)
            and self.needle_found
        )
        return Exit.OK if ok else Exit.FAILED

    def data(self) -> dict[str, object]:
        host = self.host
        needle = NEEDLE.split("vault path is ")[1].rstrip(".")
        return {
            "turns": len(list(turns())),
            "messages_sent": len(host.sent),
            "messages_in_context": len(host.messages),
            "compactions": [c.__dict__ for c in host.compactions],
            "handoff": self.handoff.get("content") if self.handoff else None,
            "lineage": self.lineage,
            "chronicle": self.chronicle_name,
            "sections": [
                {
                    "id": x.anchor.section_id,
                    "from_seq": x.anchor.from_seq,
                    "to_seq": x.anchor.to_seq,
                    "prose": x.prose,
                }
                for x in self.sections
            ],
            "search": {"query": NEEDLE_QUERY, "hits": self.hits, "found": self.needle_found},
            "expand": {
                "section": self.shown_section,
                "messages": len(self.restored),
                "bytes": sum(len(r.encode()) for r in self.restored),
                "identical": self.identical,
            },
            "prefetched_turns": [n for n, _ in host.prefetched],
            "needle_prefetched_turns": [n for n, text in host.prefetched if needle in text],
        }

    def draw(self, console: Console, kept: Path | None) -> None:
        host = self.host
        console.rule(
            "[bold]Chronicle demo[/]: a scripted long chat through the real plugin, offline"
        )
        console.print(
            f"{len(list(turns()))} turns, {len(host.sent)} messages sent; context window "
            f"{CONTEXT_LENGTH:,} tokens; Chronicle compacts above "
            f"{int(getattr(host.engine, 'threshold_tokens', 0)):,} tokens"
        )
        self._draw_compactions(console)
        self._draw_sections(console)
        hits, found = self.hits, self.needle_found
        console.print(
            f"[bold]search[/] (the agent's chronicle_search tool) {NEEDLE_QUERY!r}: "
            f"{len(hits)} hits, {'the' if found else '[bold red]NOT the[/]'} turn-3 note "
            "among them; top hit:"
        )
        if hits:
            top = hits[0]
            console.print(
                f"  seq {top.get('seq')} ({top.get('kind')}, {top.get('session')}): "
                f"{' '.join(str(top.get('text') or top.get('prose') or '').split())[:300]}"
            )
        console.print(
            f"[bold]prefetch[/]: memory was injected before {len(host.prefetched)} of "
            f"{len(list(turns()))} turns"
        )
        verdict = "[bold green]identical[/]" if self.identical else "[bold red]DIFFERENT[/]"
        size = sum(len(r.encode()) for r in self.restored)
        console.print(
            f"[bold]expand[/] {self.shown_section}: {len(self.restored)} original messages, "
            f"{size:,} bytes (via the agent's chronicle_expand tool) — byte for "
            f"byte {verdict} to what the host sent"
        )
        if self.restored:
            console.print(f"  first: {self.restored[0][:200]}")
        console.rule("[bold]next[/]")
        for line in _next_steps(kept, self.shown_section):
            console.print(line)

    def _draw_compactions(self, console: Console) -> None:
        t = Table(title="Compactions", title_justify="left")
        for col in ("turn", "session", "messages", "tokens"):
            t.add_column(col)
        for c in self.host.compactions:
            t.add_row(
                str(c.turn),
                f"{c.old_session} → {c.new_session}",
                f"{c.messages_before} → {c.messages_after}",
                f"{c.tokens_before:,} → {c.tokens_after:,}",
            )
        console.print(t)
        if self.handoff is not None:
            lines = str(self.handoff["content"]).splitlines()
            shown = "\n".join(lines[:HANDOFF_LINES])
            if len(lines) > HANDOFF_LINES:
                shown += f"\n… ({len(lines) - HANDOFF_LINES} more lines)"
            console.print(
                Panel(shown, title="the handoff the model sees now (start)", expand=False),
                soft_wrap=False,
            )

    def _draw_sections(self, console: Console) -> None:
        t = Table(
            title="Chronicle sections (each cites the seq range it covers)", title_justify="left"
        )
        t.add_column("section")
        t.add_column("seqs", justify="right")
        t.add_column("prose", overflow="fold")
        for x in self.sections:
            prose = " ".join(x.prose.split())
            t.add_row(
                x.anchor.section_id,
                f"{x.anchor.from_seq}..{x.anchor.to_seq}",
                prose[:160] + ("…" if len(prose) > 160 else ""),
            )
        console.print(t)


def _next_steps(kept: Path | None, section: str | None) -> list[str]:
    """How to keep and explore the demo's database, and what to try next."""
    db = f" --db {kept}" if kept else " --db demo.db"
    lines = (
        [f"The demo's database is kept at {kept}. Explore it:"]
        if kept
        else [
            "That database was temporary and is gone. To keep one and explore it:",
            "  chronicle demo --db demo.db",
        ]
    )
    lines += [
        f"  chronicle status{db}",
        f'  chronicle search "vault path"{db}',
        f"  chronicle tree{db}",
        f"  chronicle sections --session latest{db}",
    ]
    if section:
        lines.append(f"  chronicle expand {section} --session latest{db}")
    lines.append(
        "Then use it in Hermes: see the README's 'Install into Hermes' "
        "(`hermes chronicle doctor` checks the set-up)."
    )
    return lines
