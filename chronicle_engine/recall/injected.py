"""What per-turn memory already put into each conversation, so an item is not injected again
while it is still in the model's context.

Invariant: an item injected at log position `at` is in the context as long as the turn that
carried it is in the conversation's window (`Window.start <= at`); once a compaction has folded
that turn out, the item may be injected again (when it is relevant again). Bounded: the oldest
conversations and items are forgotten first, which only allows one more injection.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .reach import Window

__all__ = ["Injected"]

_CONVERSATIONS = 1024
_ITEMS = 512


class Injected:
    """Per conversation: item id -> the log position its block rode in with."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_conversation: OrderedDict[str, OrderedDict[str, int]] = OrderedDict()

    def still_in_context(self, conversation: str, item: str, seen: Window | None) -> bool:
        with self._lock:
            items = self._by_conversation.get(conversation)
            at = items.get(item) if items is not None else None
        return at is not None and (seen is None or at >= seen.start)

    def note(self, conversation: str, items: list[str], at: int) -> None:
        with self._lock:
            got = self._by_conversation.setdefault(conversation, OrderedDict())
            self._by_conversation.move_to_end(conversation)
            for item in items:
                got[item] = at
                got.move_to_end(item)
            while len(got) > _ITEMS:
                got.popitem(last=False)
            while len(self._by_conversation) > _CONVERSATIONS:
                self._by_conversation.popitem(last=False)
