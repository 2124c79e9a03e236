"""What an export writes for an event whose words were forgotten.

The log is append-only: forgetting never edits it, and the `MemoryForgotten` event in it is the
record that something was forgotten. An export, though, is a read that leaves the store, so it
leaves the words out the way every derived table does:
- a forgotten message keeps its envelope (id, seq, session), role, speaker and tree links, so an
  import rebuilds the same tree and the same seqs; its text, content and tool arguments are
  replaced by `FORGOTTEN`;
- a `TurnStarted` preview that is the start of a forgotten user message is blanked;
- a compaction entry whose handoff cited a range holding a forgotten message no longer carries
  that handoff's text (the sections it cited were redrawn without the message; expanding them
  gives what remains); a shortened copy it records of a forgotten message, or a context edit's
  replacement of one, keeps only its role and ids;
- a pass's ledger (the context engine's `PassLedger`, which lists words of the range it folded,
  and as the pass records it the text of folded messages the log holds otherwise) whose range
  holds a forgotten message keeps its counts, not its lists of words.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from ..capture.events import HOST_NAMESPACE
from ..capture.events import NAMESPACE as CHAT_NAMESPACE
from ..capture.shortened import origin
from ..chronicle.sections import split_section_id
from ..log.port import LogStore
from ..log.store import StoredEvent
from .events import NAMESPACE as TREE_NAMESPACE

# The context engine's pass ledger, named here by its stored namespace and type (the engine sits
# above the session tree): the fields that hold words of the range it folded.
_LEDGER = ("chronicle.context", "PassLedger")
_LEDGER_WORDS = ("in_handoff", "in_sections", "left_out", "own")

__all__ = ["FORGOTTEN", "Forgotten", "redact", "redacted"]

FORGOTTEN = "[forgotten]"
WITHDRAWN = (
    "[withdrawn: this handoff summarised messages that were later forgotten; the sections it "
    "cited were redrawn without them]"
)


@dataclass(frozen=True, slots=True)
class Forgotten:
    """The forgotten messages an export leaves out: their seqs, and the text of each forgotten
    user message as a turn's preview starts (whitespace folded)."""

    seqs: frozenset[int] = frozenset()
    openings: frozenset[tuple[str | None, str]] = frozenset()

    @classmethod
    def read(cls, store: LogStore, seqs: Collection[int]) -> Forgotten:
        openings: set[tuple[str | None, str]] = set()
        for seq in seqs:
            event = store.get(int(seq))
            if event is None or event.envelope.namespace != CHAT_NAMESPACE:
                continue
            text = event.payload.get("text")
            if event.payload.get("role") == "user" and isinstance(text, str) and text.strip():
                openings.add((event.envelope.session, " ".join(text.split())))
        return cls(frozenset(int(s) for s in seqs), frozenset(openings))

    def previewed(self, session: str | None, preview: object) -> bool:
        """Whether a turn's preview is the start of a forgotten user message of its session."""
        start = str(preview or "").removesuffix("…")
        return bool(start) and any(
            s == session and text.startswith(start) for s, text in self.openings
        )

    def __bool__(self) -> bool:
        return bool(self.seqs)


def _message(message: object) -> dict[str, object]:
    """The wire message without its words: role, and the ids that tie tool calls to results."""
    if not isinstance(message, dict):
        return {"content": FORGOTTEN}
    out: dict[str, object] = {"role": message.get("role"), "content": FORGOTTEN}
    if "tool_call_id" in message:
        out["tool_call_id"] = message["tool_call_id"]
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [
            {
                "id": c.get("id"),
                "type": c.get("type", "function"),
                "function": {"name": (c.get("function") or {}).get("name"), "arguments": "{}"},
            }
            for c in calls
            if isinstance(c, dict)
        ]
    return out


def _cites(section_ids: Iterable[object], seqs: frozenset[int]) -> bool:
    for label in section_ids:
        try:
            lo, hi, _ = split_section_id(str(label).rpartition(":")[2])
        except ValueError:
            return True  # a label we cannot read: do not vouch for its text
        if any(lo <= s <= hi for s in seqs):
            return True
    return False


def redact(event: StoredEvent, forgotten: Forgotten) -> StoredEvent:
    """The event as an export writes it (itself when nothing of it was forgotten)."""
    if not forgotten:
        return event
    env, payload = event.envelope, event.payload
    if env.namespace == CHAT_NAMESPACE:
        if env.type == "MessageCaptured" and env.seq in forgotten.seqs:
            blank = {
                **payload,
                "message": _message(payload.get("message")),
                "text": FORGOTTEN,
                "person_text": "",
                "host_spans": [],
            }
            return StoredEvent(env, blank)
        return event
    if env.namespace == HOST_NAMESPACE:
        if env.type == "TurnStarted" and forgotten.previewed(env.session, payload.get("preview")):
            return StoredEvent(env, {**payload, "preview": ""})
        return event
    if (env.namespace, env.type) == _LEDGER:
        lo, hi = payload.get("from_seq"), payload.get("to_seq")
        if (
            isinstance(lo, int)
            and isinstance(hi, int)
            and any(lo <= s <= hi for s in forgotten.seqs)
        ):
            return StoredEvent(env, {**payload, **dict.fromkeys(_LEDGER_WORDS, [])})
        return event
    if env.namespace != TREE_NAMESPACE:
        return event
    if env.type == "ContextEdited" and origin(payload.get("replacement")) in forgotten.seqs:
        return StoredEvent(env, {**payload, "replacement": _message(payload.get("replacement"))})
    if env.type != "CompactionRecorded":
        return event
    out = dict(payload)
    copies = payload.get("shortened")
    if isinstance(copies, dict) and any(origin(c) in forgotten.seqs for c in copies.values()):
        out["shortened"] = {
            k: _message(c) if origin(c) in forgotten.seqs else c for k, c in copies.items()
        }
    cited = payload.get("section_ids")
    if payload.get("summary") and _cites(cited if isinstance(cited, list) else (), forgotten.seqs):
        out["summary"] = WITHDRAWN
    return event if out == payload else StoredEvent(env, out)


def redacted(events: Iterable[StoredEvent], forgotten: Forgotten) -> Iterator[StoredEvent]:
    for event in events:
        yield redact(event, forgotten)
