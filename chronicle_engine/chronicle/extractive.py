"""The embedded summariser: extractive, deterministic, offline. Same messages, same prose.

A section's prose is a list of lines, each with a prefix a later condensation can read again:
`User:` (the person's request, verbatim up to a cap), `Decision:` (an assistant sentence that
settles something), `Assistant:` (the start of any other reply), `Step:` (one line per tool call:
the call and its outcome), `Facts:` (identifiers, paths, numbers, dates, URLs seen in the range).
Over budget, lines go in a fixed order (plain replies, then middle steps, then facts, then
decisions; the person's requests last) and the prose says how many went and how to get them back.
Only the first part of each message is scanned, so the cost is bounded per message, and a line
the budget cannot keep whatever it says is never drawn (`_drawn`). Every text is read through
`masked_view`, so no credential reaches the prose; the log keeps the originals.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from ..capture.secrets import MASK_MARK
from ..messages import content_text, is_real_user, masked_view, tool_calls

__all__ = ["summarize_messages", "condense_prose", "focus_terms", "facts_in"]

_SCAN_CHARS = 800
_FACT_SCAN_CHARS = 1600  # of a request or a reply, scanned for facts
_TOOL_HEAD_CHARS = 600  # of a tool output: its start ...
_TOOL_TAIL_CHARS = 300  # ... and its end
_ARGS_SCAN_CHARS = 240  # of a call's arguments (the Step line shows the call anyway)
_USER_CAP = 1200
_USER_HEAD = 900
_USER_TAIL = 200
_REPLY_CAP = 220
_STEP_CAP = 200
_MAX_FACTS = 80
_FACTS_CHARS = 1600
_FACTS_SHARE = 4  # the fact line takes at most a quarter of a section's characters

_FACT_CHARS = frozenset("0123456789/@_")
_ASCII_DIGITS = frozenset(string.digits)
_ASCII_LETTERS = frozenset(string.ascii_letters)
# Where a fact-like word may be: a candidate character and the rest of its word (up to the next
# whitespace), so one match per word and no second search for where the word ends.
_FACT_HIT = re.compile(r"[0-9/@_A-Z]\S*")
# The same for an ASCII text, without the regex engine: each byte becomes 0 (a candidate), 1 (a
# space, newline or tab: where a word starts after and ends), 3 (other whitespace, as `\s` and
# `str.isspace` see it: a word ends there too) or 2, so words are found by `bytes.find` (memchr).
_ASCII_MARKS = bytes(
    0
    if chr(b) in "0123456789/@_ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    else 1
    if chr(b) in " \n\t"
    else 3
    if chr(b).isspace()
    else 2
    for b in range(256)
)
STRIP = ".,;:!?()[]{}<>\"'`*"
_FACTS_SCANNED = 800  # messages scanned for facts at most, spread evenly over the range
_FACTS_PER_MESSAGE = 6

# Keyword tests on lower-cased text: far cheaper than a regex alternation per sentence.
_ERROR_WORDS = (
    "error",
    "exception",
    "traceback",
    "failed",
    "failure",
    "denied",
    "not found",
    "exit code 1",
    "exit code 2",
    "exit status 1",
    "exit status 2",
)
_DECISION_WORDS = (
    "decid",
    "decision",
    "we will",
    "i will",
    "we'll",
    "i'll",
    "let's",
    "agreed",
    "chose",
    "choose",
    "going with",
    "plan is",
    "conclusion",
    "fixed",
    "resolved",
    "root cause",
    "switched to",
    "settled on",
    "instead of",
)


# The decision words by a part they share (as `_ERROR_GROUPS`): 15 searches of a text that
# holds none, not 19.
_DECISION_GROUPS = tuple(
    (part, tuple(w for w in _DECISION_WORDS if part in w))
    for part in ("deci", " will", "'ll", "cho")
) + tuple(
    (w, (w,)) for w in _DECISION_WORDS if not any(p in w for p in ("deci", " will", "'ll", "cho"))
)


def _is_decision(lowered: str) -> bool:
    for part, words in _DECISION_GROUPS:
        if part in lowered and any(word in lowered for word in words):
            return True
    return False


# The error words by a part they share: a text without the part holds none of its words, so
# most outputs are searched for 7 strings, not 11 (`_first_error`).
_ERROR_GROUPS = tuple(
    (part, tuple(w for w in _ERROR_WORDS if w.startswith(part)))
    for part in (
        "error",
        "exception",
        "traceback",
        "fail",
        "denied",
        "not found",
        "exit code ",
        "exit status ",
    )
)


def _first_error(lowered: str) -> int:
    """Where the first error word of `lowered` starts (-1: none)."""
    hit = -1
    for part, words in _ERROR_GROUPS:
        if part in lowered:
            for word in words:
                at = lowered.find(word)
                if at >= 0 and (hit < 0 or at < hit):
                    hit = at
    return hit


def _sentences_at_spaces(text: str) -> list[str]:
    """`text` split where whitespace follows a [.!?] (the mark stays with its sentence, the
    whitespace goes), as splitting on whitespace preceded by one of them would; found by
    `str.find` per mark. (Not recall's `_sentences`: that one cuts only where more text follows,
    at CJK stops too.)"""
    out: list[str] = []
    position = 0
    n = len(text)
    marks = [text.find("."), text.find("!"), text.find("?")]
    while True:
        at = min((m for m in marks if m >= 0), default=-1)
        if at < 0:
            break
        k = marks.index(at)
        marks[k] = text.find(".!?"[k], at + 1)
        end = at + 1
        while end < n and text[end].isspace():
            end += 1
        if end > at + 1:
            out.append(text[position : at + 1])
            position = end
    out.append(text[position:])
    return out


_WORD = re.compile(r"[A-Za-z0-9_./-]{4,}")
_ARG_KEYS = ("command", "cmd", "path", "file_path", "filename", "query", "url", "pattern", "name")

# Lower rank goes first when over budget. The fact line is bounded instead (a quarter of the
# budget at most) and never dropped: it is the densest line of all.
_RANK_REPLY, _RANK_STEP, _RANK_DECISION, _RANK_USER, _RANK_FACTS, _RANK_FRAME = 0, 1, 2, 3, 5, 6
_COMPACT_USER = 220
_NOTE_RESERVE = 110
_COMPACT_OTHER = 140


@dataclass(slots=True)
class _Line:
    """A line a summary may keep: its rank, its text and its place in the original order."""

    rank: int
    text: str
    order: int
    focused: bool = False
    compact: str | None = None  # a shorter form, tried before the line is dropped

    @property
    def least(self) -> int:
        """The characters it takes once shortened, with its line break (see `_fit`)."""
        compact = self.compact
        if compact is not None and len(compact) < len(self.text):
            return len(compact) + 1
        return len(self.text) + 1


def _line(rank: int, text: str, order: int, focused: bool, compact: int | None = None) -> _Line:
    short = _one_line(text, compact) if compact is not None and len(text) > compact else None
    return _Line(rank, text, order, focused, short)


# (rank, text, the cap of its shorter form): what drawing a `_Later` line gives.
_Drawing = Callable[[], tuple[int, str, int | None]]


@dataclass(slots=True)
class _Later:
    """A line whose text is drawn only if it can be kept (`_drawn`): a step, a reply, a host's
    note. `most`: the highest rank its text can give it (a step with an error is a decision)."""

    most: int
    order: int
    focused: bool
    draw: _Drawing

    def line(self) -> _Line:
        rank, text, compact = self.draw()
        return _line(rank, text, self.order, self.focused, compact)


def focus_terms(focus: str | None) -> tuple[str, ...]:
    if not focus:
        return ()
    return tuple(dict.fromkeys(w.casefold() for w in _WORD.findall(focus)))


def _mentions(text: str, terms: Sequence[str]) -> bool:
    if not terms:
        return False
    folded = text.casefold()
    return any(term in folded for term in terms)


def _one_line(text: str, cap: int) -> str:
    head = text[: cap * 3]
    # The line of a prefix is a prefix of the line (each run of whitespace becomes one space),
    # so when the first words already run past the cap, the rest need not be split.
    probe = head[: cap + cap // 4 + 2]
    if len(probe) < len(head):
        flat = _single_spaced(probe)
        if len(flat) > cap:
            return flat[: cap - 1].rstrip() + "…"
    flat = _single_spaced(head)
    return flat if len(flat) <= cap else flat[: cap - 1].rstrip() + "…"


def _single_spaced(text: str) -> str:
    """`" ".join(text.split())`: each run of whitespace one space, none at either end. A text
    already so comes back as it is, unsplit (printable text holds no whitespace but " ")."""
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    return " ".join(text.split())


def _verbatim_request(text: str, cap: int) -> str:
    text = text.strip()
    if len(text) <= cap:
        return text
    head = int(cap * _USER_HEAD / _USER_CAP)
    tail = int(cap * _USER_TAIL / _USER_CAP)
    omitted = len(text) - head - tail
    return f"{text[:head]} […{omitted} characters omitted…] {text[-tail:]}"


def _call_summary(name: str, arguments: str) -> str:
    shown = arguments.strip()
    try:
        parsed = json.loads(arguments) if arguments else {}
    except (ValueError, TypeError):
        parsed = None
    if isinstance(parsed, dict):
        for key in _ARG_KEYS:
            value = parsed.get(key)
            if isinstance(value, str) and value:
                shown = value
                break
        else:
            shown = json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))
    return f"{name or 'tool'}({_one_line(shown, 90)})"


def _outcome(
    result: dict[str, object] | None,
    view: Callable[[dict[str, object]], dict[str, object]] = masked_view,
) -> str:
    if result is None:
        return "no result recorded"
    text = content_text(view(result))[:_SCAN_CHARS].strip()
    if not text:
        return "empty result"
    lowered = text.lower()
    hit = _first_error(lowered)
    if hit >= 0:
        start = text.rfind("\n", 0, hit) + 1
        return "ERROR " + _one_line(text[start:], 110)
    # The text is stripped, so its first line holds more than whitespace; when it holds no
    # line break of `splitlines`' other kinds (all unprintable), it is that first line.
    first = text.partition("\n")[0]
    if not first.isprintable():
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
    return _one_line(first, 110)


def facts_in(text: str, limit: int = _FACTS_PER_MESSAGE) -> list[str]:
    """Identifier-like words of `text`: with a digit, a slash, an @ or an underscore (paths,
    numbers, dates, ids, URLs, e-mail addresses, snake_case), or inner capitals (CamelCase,
    ALLCAPS). Only the words around a candidate character are looked at, so plain prose costs
    one C-level scan."""
    found: list[str] = []
    if not text:  # (a call's empty content, scanned like any text)
        return found
    if not text.isascii():
        for start, end in _candidate_words(text):
            if _take(text[start:end], found) and len(found) >= limit:
                break
        return found
    # An ASCII text is read as its marks (`_ASCII_MARKS`), inline: every folded message of a
    # pass comes here, most of them holding a candidate or two.
    marks = text.encode("ascii").translate(_ASCII_MARKS)
    i = marks.find(0)
    if i < 0:
        return found
    n = len(marks)
    rare_space = 3 in marks
    while i >= 0:
        end = marks.find(1, i)
        if end < 0:
            end = n
        if rare_space:
            other = marks.find(3, i, end)
            if other >= 0:
                end = other
        if _take(text[marks.rfind(1, 0, i) + 1 : end], found) and len(found) >= limit:
            break
        i = marks.find(0, end)
    return found


def _take(word: str, found: list[str]) -> bool:
    """Append `word` to `found` if it is a fact not found yet; whether it was."""
    if len(word) > 120:
        return False
    if word.isalpha():
        # Plain words ("Deploy", "the") are not facts; CamelCase and ALLCAPS are.
        if word.islower() or len(word) < 3 or (word[0].isupper() and word[1:].islower()):
            return False
    elif _FACT_CHARS.isdisjoint(word) and word[1:] == word[1:].lower():
        return False
    word = word.strip(STRIP)
    if len(word) < 2 or word in found or MASK_MARK in word:
        return False  # a masked credential is not a fact worth a place on the line
    found.append(word)
    return True


def _candidate_words(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each word of a non-ASCII text holding a candidate character: from after
    the last space, newline or tab before the character to the next whitespace (`facts_in`
    finds the same words of an ASCII text without the regex engine)."""
    for hit in _FACT_HIT.finditer(text):
        i, end = hit.span()
        yield (
            max(text.rfind(" ", 0, i), text.rfind("\n", 0, i), text.rfind("\t", 0, i)) + 1,
            end,
        )


def _spread(items: Sequence[int], count: int) -> list[int]:
    """`count` items spread evenly over `items`, both ends included."""
    if len(items) <= count:
        return list(items)
    step = (len(items) - 1) / max(1, count - 1)
    return [items[round(k * step)] for k in range(count)]


def _fact_text(message: Mapping[str, object], text: str | None = None) -> tuple[str, int]:
    """The part of a message scanned for facts, and its weight (see `_facts`)."""
    if text is None:
        text = content_text(message)
    if message.get("role") == "tool":
        # Tool output is bulk: its start and its end (where results and errors land).
        tail = text[-_TOOL_TAIL_CHARS:] if len(text) > _TOOL_HEAD_CHARS else ""
        return text[:_TOOL_HEAD_CHARS] + "\n" + tail, 0
    return text[:_FACT_SCAN_CHARS], 1


def _facts(texts: Sequence[tuple[str, int]], limit: int) -> list[str]:
    """Up to `limit` distinct facts from `(text, weight)` pairs, the most telling first: a value
    seen once (an id, a code) over one that recurs (a template like "service-12"), letters with
    digits over bare numbers, the person's and the assistant's words (weight 1) over tool output
    (0) and commands (-1, already on the Step lines). Within the last tier that fits, facts are
    drawn evenly from across the range, not just its start. Returned best first."""
    counts: dict[str, int] = {}  # by lower-cased value: "Service-4" recurs as "service-4"
    weight: dict[str, int] = {}  # of each value's first appearance, in order of appearance
    for text, w in texts:
        for value in facts_in(text):
            key = value.lower()
            counts[key] = counts.get(key, 0) + 1
            if value not in weight:
                weight[value] = w

    tiers: dict[int, list[str]] = {}
    for value, points in weight.items():
        if counts[value.lower()] == 1:
            points += 2
        if value.isascii():  # (the ASCII characters isdigit and isalpha accept)
            has_digit = not _ASCII_DIGITS.isdisjoint(value)
            has_alpha = has_digit and not _ASCII_LETTERS.isdisjoint(value)
        else:
            has_digit = any(c.isdigit() for c in value)
            has_alpha = has_digit and any(c.isalpha() for c in value)
        if has_alpha:
            points += 1
        elif has_digit and value.isdigit() and len(value) < 4:
            points -= 2
        tiers.setdefault(points, []).append(value)
    chosen: list[str] = []
    for tier in sorted(tiers, reverse=True):
        values = tiers[tier]
        room = limit - len(chosen)
        if room <= 0:  # the tiers above filled it exactly
            break
        if len(values) <= room:
            chosen += values
            continue
        step = len(values) / room
        chosen += [values[int(k * step)] for k in range(room)]
        break
    # Best first (the tiers were taken in that order); ties (and the evenly drawn last tier) in
    # order of appearance.
    return chosen


def _fact_line(values: Sequence[str], cap: int) -> str:
    """'Facts: a, b, c' within `cap` characters: whole values only (a cut value would be a wrong
    fact), taken in the order given (best first) while they fit, shown in that order."""
    chosen: list[str] = []
    length = len("Facts: ")
    for value in values:
        extra = len(value) + (2 if chosen else 0)
        if not value or length + extra > cap:
            continue
        chosen.append(value)
        length += extra
    return "Facts: " + ", ".join(chosen)


def _round_robin(lists: Sequence[Sequence[str]]) -> list[str]:
    """The first of every list, then the second of every list, ...: no part crowds out the rest."""
    out: dict[str, None] = {}
    for k in range(max((len(x) for x in lists), default=0)):
        for values in lists:
            if k < len(values):
                out.setdefault(values[k], None)
    return list(out)


def _middle_out(n: int) -> Iterable[int]:
    middle = n // 2
    if n:
        yield middle
    for step in range(1, n):
        if middle - step >= 0:
            yield middle - step
        if middle + step < n:
            yield middle + step
        if middle - step < 0 and middle + step >= n:
            return


def _fit(lines: list[_Line], budget_chars: int, restore: str, omitted: int = 0) -> str:
    """Drop the least important lines (middle ones first within a rank) until the text fits.
    `omitted`: lines of lower rank than all of `lines` left out already (see `_drawn`)."""
    total = sum(len(ln.text) + 1 for ln in lines)
    if total <= budget_chars:
        return "\n".join(ln.text for ln in lines)
    # First the shorter forms (least important kinds first, middle lines first): more lines
    # survive, each with its opening.
    shortening = sorted(
        (ln for ln in lines if ln.compact is not None and len(ln.compact) < len(ln.text)),
        key=lambda ln: ln.rank + (1 if ln.focused else 0),
    )
    for ln in shortening:
        if total <= budget_chars:
            break
        assert ln.compact is not None
        total -= len(ln.text) - len(ln.compact)
        ln.text = ln.compact
    if total <= budget_chars:
        return "\n".join(ln.text for ln in lines)
    dropped: set[int] = set()
    by_rank: dict[int, list[_Line]] = {}
    for ln in lines:
        # A line about the focus outranks its kind: it goes after every unfocused one.
        by_rank.setdefault(ln.rank + (1 if ln.focused else 0), []).append(ln)
    budget_chars -= _NOTE_RESERVE  # the line saying what was omitted and how to get it back
    for rank in sorted(r for r in by_rank if r < _RANK_FACTS):
        candidates = by_rank[rank]
        # Keep the ends of a run (how it started, where it got to); drop from the middle out.
        for k in _middle_out(len(candidates)):
            if total <= budget_chars:
                break
            ln = candidates[k]
            dropped.add(ln.order)
            total -= len(ln.text) + 1
        if total <= budget_chars:
            break
    kept = [ln for ln in lines if ln.order not in dropped]
    note = (
        f"({len(dropped) + omitted} more lines omitted; {restore} returns every original message.)"
    )
    text = "\n".join(ln.text for ln in kept)
    if len(text) + len(note) + 1 > budget_chars:
        text = text[: max(0, budget_chars - len(note) - 2)].rstrip() + "…"
    return (text + "\n" + note) if text else note


def _sample(
    messages: Sequence[dict[str, object]], budget_chars: int
) -> tuple[set[int] | None, float]:
    """Bounded work on a huge fold: only so many lines can survive the budget, so lines are
    made for an even spread of messages (every request while they are few enough; None: every
    message), and facts are scanned in an even spread too (the share of messages scanned)."""
    n = len(messages)
    line_cap = max(300, budget_chars // 25)
    detail: set[int] | None = None
    if n > 2 * line_cap:
        users = [
            i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"
        ]
        detail = set(_spread(range(n), line_cap))
        detail.update(users if len(users) <= line_cap else _spread(users, line_cap))
    return detail, min(1.0, _FACTS_SCANNED / n) if n else 1.0


class _Reader:
    """A fold's messages as the summary reads them: each masked once (a tool result is read
    twice, as its call's outcome and as itself), and the tool results by their call's id.
    `clean`: indices of messages known to hold no credential (read unmasked)."""

    def __init__(self, messages: Sequence[dict[str, object]], clean: Collection[int]) -> None:
        self.messages = messages
        self.views: dict[int, dict[str, object]] = {
            id(messages[i]): messages[i] for i in clean if i < len(messages)
        }
        self._results: dict[str, dict[str, object]] | None = None  # (read for the first step)

    def result(self, call_id: str) -> dict[str, object] | None:
        if self._results is None:
            self._results = {}
            for m in self.messages:
                if isinstance(m, dict) and m.get("role") == "tool":
                    found = m.get("tool_call_id")
                    if isinstance(found, str):
                        self._results.setdefault(found, m)
        return self._results.get(call_id)

    def view(self, raw: dict[str, object]) -> dict[str, object]:
        seen = self.views.get(id(raw))
        if seen is None:
            seen = self.views[id(raw)] = masked_view(raw)
        return seen

    def step(self, call_id: str, name: str, arguments: str) -> tuple[int, str, int | None]:
        """A tool call's Step line: the call and its outcome (a decision when it failed)."""
        outcome = _outcome(self.result(call_id), self.view)
        step = f"Step: {_call_summary(name, arguments)} → {outcome}"
        rank = _RANK_DECISION if outcome.startswith("ERROR") else _RANK_STEP
        return rank, _one_line(step, _STEP_CAP), None


def _reply(head: str, focused: bool) -> tuple[int, str, int | None]:
    """An assistant's line: its deciding sentences, else the start of its reply."""
    decisions = (
        [s for s in _sentences_at_spaces(head) if _is_decision(s.lower())]
        if _is_decision(head.lower())
        else []
    )
    if decisions:
        cap = _REPLY_CAP * 2 if focused else _REPLY_CAP
        return _RANK_DECISION, "Decision: " + _one_line(" ".join(decisions), cap), _COMPACT_OTHER
    return _RANK_REPLY, "Assistant: " + _one_line(head, _REPLY_CAP), None


def _note(prefix: str, text: str) -> tuple[int, str, int | None]:
    return _RANK_REPLY, prefix + _one_line(text, _REPLY_CAP), None


def _said(
    role: object, message: dict[str, object], text: str, head: str, focused: bool, order: int
) -> _Line | _Later | None:
    """The line of what a message says, if any: a person's request (drawn now: it outranks
    the rest), a host's note, an assistant's decision or reply, a system message."""
    if role == "user":
        if is_real_user(message):
            request = "User: " + _verbatim_request(text, _USER_CAP * 2 if focused else _USER_CAP)
            return _line(_RANK_USER, request, order, focused, _COMPACT_USER)
        if text.strip():
            return _Later(_RANK_REPLY, order, focused, partial(_note, "Host: ", text))
    elif role == "assistant":
        if text.strip():
            return _Later(_RANK_DECISION, order, focused, partial(_reply, head, focused))
    elif role == "system" and text.strip():
        return _Later(_RANK_REPLY, order, focused, partial(_note, "System: ", text))
    return None


def _read(
    reader: _Reader,
    m: dict[str, object],
    terms: Sequence[str],
    scan: bool,
    lines: list[_Line | _Later],
    scanned: list[tuple[str, int]],
) -> None:
    """One message's lines (what it says, a Step per tool call) and, when `scan`, the texts
    its facts are read from."""
    role = m.get("role")
    text = content_text(m)
    head = text[:_SCAN_CHARS]
    if scan:
        scanned.append(_fact_text(m, text))
    focused = bool(terms) and _mentions(head, terms)
    said = _said(role, m, text, head, focused, len(lines))
    if said is not None:
        lines.append(said)
    if role == "assistant" and m.get("tool_calls"):
        for call_id, name, arguments in tool_calls(m):
            if scan:
                scanned.append((arguments[:_ARGS_SCAN_CHARS], -1))
            lines.append(
                _Later(
                    _RANK_DECISION,
                    len(lines),
                    focused or (bool(terms) and _mentions(arguments, terms)),
                    partial(reader.step, call_id, name, arguments),
                )
            )


def summarize_messages(
    messages: Sequence[dict[str, object]],
    *,
    budget_chars: int,
    focus: str | None = None,
    restore: str = "chronicle_expand",
    clean: Collection[int] = (),
) -> str:
    """Extractive prose for a folded run of wire messages, at most about `budget_chars` long.
    `clean`: indices of messages known to hold no credential (read unmasked). A line the
    budget cannot keep is never drawn (`_drawn`); every scanned message gives its facts."""
    terms = focus_terms(focus)
    reader = _Reader(messages, clean)
    lines: list[_Line | _Later] = []
    scanned: list[tuple[str, int]] = []
    detail, share = _sample(messages, budget_chars)
    for index, raw in enumerate(messages):
        if not isinstance(raw, dict):
            continue
        # A hashed sample, not every k-th message: a fixed stride would keep hitting the same
        # place of each turn (always the request, never the answer).
        scan = share >= 1.0 or (index * 2654435761) % 4294967296 < share * 4294967296
        if detail is None or index in detail:
            _read(reader, reader.view(raw), terms, scan, lines, scanned)
        elif scan:  # only what is read is masked: on a huge fold, a bounded sample
            scanned.append(_fact_text(reader.view(raw)))
    facts = _facts(scanned, _MAX_FACTS)
    if facts:
        cap = max(80, min(_FACTS_CHARS, budget_chars // _FACTS_SHARE))
        lines.append(_Line(_RANK_FACTS, _fact_line(facts, cap), len(lines)))
    if terms:
        lines.insert(0, _Line(_RANK_FRAME, f"Focus: {focus}", -1))
    kept, omitted = _drawn(lines, budget_chars)
    return _fit(kept, budget_chars, restore, omitted)


def _drawn(lines: Sequence[_Line | _Later], budget_chars: int) -> tuple[list[_Line], int]:
    """The lines `_fit` can keep, drawn, and how many of lower rank it would drop whatever they
    say. Ranks are drawn from the top down; once the lines at or above a rank take more than the
    budget even shortened, `_fit` drops every line below it (middle-out within each rank, the
    text staying over budget throughout) and shortens every line kept (it stops shortening only
    at a total within budget): the same prose as drawing every line."""
    least = [0] * (_RANK_FRAME + 2)  # characters of the drawn lines of each rank, shortened
    later: list[list[_Later]] = [[] for _ in least]  # by the highest rank each can take
    for item in lines:
        if isinstance(item, _Later):
            later[item.most + item.focused].append(item)
        else:
            least[item.rank + item.focused] += item.least
    drawn: dict[int, _Line] = {}
    taken = 0
    for rank in range(len(least) - 1, -1, -1):
        for item in later[rank]:
            line = drawn[item.order] = item.line()
            least[line.rank + line.focused] += line.least
        taken += least[rank]
        if taken > budget_chars:
            break
    rank = min(rank, _RANK_FACTS)  # `_fit` never drops the facts, nor the frame above them
    kept = [
        ln
        for ln in (drawn.get(x.order, x) for x in lines)
        if isinstance(ln, _Line) and ln.rank + ln.focused >= rank
    ]
    return kept, len(lines) - len(kept)


_RANGE = re.compile(r"(\d+)-(\d+)")
_FACTS_SHARE_CONDENSED = 0.75  # of a condensed section's characters, its fact line's
_CONDENSED_LINE = 160  # of a child's line, kept in a condensed section
_LINE_RANKS = {"User:": 0, "Decision:": 1, "Step:": 2}  # the order lines are kept in per child


def _span(label: str) -> int:
    """How many seqs a child's label covers ('L3:10-90' -> 81); 1 when it names none."""
    found = _RANGE.search(label)
    return max(1, int(found.group(2)) - int(found.group(1)) + 1) if found else 1


def _shares(weights: Sequence[int], total: int, floor: int) -> list[int]:
    """`total` split in proportion to `weights`, each at least `floor` while that fits."""
    if not weights:
        return []
    whole = sum(weights)
    floor = min(floor, total // len(weights))
    rest = total - floor * len(weights)
    return [floor + rest * w // whole for w in weights]


def _evenly(items: Sequence[str], count: int) -> list[str]:
    """`count` items spread evenly over `items`, in their order."""
    if count <= 0:
        return []
    if len(items) <= count:
        return list(items)
    return [items[k] for k in _spread(range(len(items)), count)]


@dataclass(slots=True)
class _Child:
    """A child section as its condensed parent reads it: its lines, facts and own identifiers."""

    label: str
    weight: int
    lines: list[tuple[int, str, bool]]  # (rank, text, focused), in the child's order
    facts: list[str]
    later: set[str]  # its facts that a later child names again (what was referred back to)
    own: set[str]  # its identifiers no other child names (what this part alone was about)


def _read_child(label: str, prose: str, terms: Sequence[str]) -> _Child:
    lines: list[tuple[int, str, bool]] = []
    facts: list[str] = []
    for raw in prose.splitlines():
        line = raw.strip()
        if not line or line.startswith("[") or line.startswith("Focus:") or line.startswith("("):
            continue
        if line.startswith("Facts:"):
            facts += [v.strip() for v in line[len("Facts:") :].split(",") if v.strip()]
            continue
        rank = next((r for prefix, r in _LINE_RANKS.items() if line.startswith(prefix)), 3)
        lines.append((rank, line, _mentions(line, terms)))
    return _Child(label, _span(label), lines, list(dict.fromkeys(facts)), set(), set())


def _fitting(pick: Callable[[int], list[str]], chars: int, most: int, sep: int) -> list[str]:
    """The largest `pick(k)` (k <= most) whose items, `sep` characters apart, fit `chars`; at
    least `pick(1)`."""
    k = most
    while k > 1:
        chosen = pick(k)
        if sum(len(x) + sep for x in chosen) <= chars:
            return chosen
        k = min(k - 1, max(1, k * chars // max(1, sum(len(x) + sep for x in chosen))))
    return pick(1)


def _child_lines(child: _Child, count: int) -> list[str]:
    """The child's `count` most salient lines, in its order: about the focus first, then the
    person's requests naming what later parts referred back to, then requests, decisions, steps,
    each kind drawn evenly across the child (so every part of its range keeps a line)."""
    chosen: set[int] = set()

    def take(indices: Sequence[int]) -> None:
        room = count - len(chosen)
        if room > 0:
            chosen.update(int(i) for i in _evenly([str(i) for i in indices], room))

    lines = child.lines
    take([i for i, (_, _, focused) in enumerate(lines) if focused])
    take(
        [
            i
            for i, (rank, text, _) in enumerate(lines)
            if rank == 0 and any(f in text for f in child.later)
        ]
    )
    for wanted in range(4):
        take([i for i, (rank, _, _) in enumerate(lines) if rank == wanted and i not in chosen])
    return [_one_line(lines[i][1], _CONDENSED_LINE) for i in sorted(chosen)]


def _named(value: str) -> bool:
    """An identifier that names one thing (a ticket, a host, a version), not a path or a bare
    number: letters and digits, short."""
    return (
        len(value) <= 24
        and "/" not in value
        and not _ASCII_DIGITS.isdisjoint(value)
        and not _ASCII_LETTERS.isdisjoint(value)
    )


def _child_facts(child: _Child, count: int) -> list[str]:
    """The child's `count` facts, in its order: those later parts referred back to first, then
    identifiers only this part names, then other identifiers, then the rest, each drawn evenly
    across the child."""
    chosen: set[str] = set()
    for tier in (
        [f for f in child.facts if f in child.later],
        [f for f in child.facts if f in child.own],
        [f for f in child.facts if _named(f)],
        child.facts,
    ):
        chosen.update(_evenly([f for f in tier if f not in chosen], count - len(chosen)))
    return [f for f in child.facts if f in chosen]


def condense_prose(
    children: Sequence[tuple[str, str]],
    *,
    budget_chars: int,
    focus: str | None = None,
    restore: str = "chronicle_expand",
) -> str:
    """Prose for a higher-level section from its children's prose, `(label, prose)` each.

    The whole range in proportion: each child gets lines and facts in proportion to the range
    it covers (at least one line each), its most salient first (see `_child_lines`), and the
    merged fact line keeps the children's order. A condensed child is itself proportional, so
    every part of the conversation keeps its share however deep the levels go."""
    terms = focus_terms(focus)
    parsed = [_read_child(label, prose, terms) for label, prose in children]
    texts = [" ".join(text for _, text, _ in c.lines) + " " + " ".join(c.facts) for c in parsed]
    for k, child in enumerate(parsed):
        child.own = {
            f
            for f in child.facts
            if _named(f) and not any(f in t for t in texts[:k] + texts[k + 1 :])
        }
        # Named again by a later part, and not by most parts (a host every turn names is no
        # reference back).
        child.later = {
            f
            for f in child.facts
            if len(f) >= 3
            and any(f in t for t in texts[k + 1 :])
            and sum(f in t for t in texts) <= max(2, len(texts) // 3)
        }
    budget = max(80, budget_chars - _NOTE_RESERVE)
    weights = [c.weight for c in parsed]
    has_facts = any(c.facts for c in parsed)
    facts_chars = int(budget * _FACTS_SHARE_CONDENSED) if has_facts else 0
    frames = sum(len(c.label) + 3 for c in parsed)
    line_shares = _shares(weights, max(0, budget - facts_chars - frames), _CONDENSED_LINE)
    lines: list[_Line] = []
    order = 0
    for child, chars in zip(parsed, line_shares, strict=True):
        lines.append(_Line(_RANK_FRAME, f"[{child.label}]", order))
        order += 1
        kept = (
            _fitting(partial(_child_lines, child), chars, len(child.lines), 1)
            if child.lines
            else []
        )
        for text in kept:
            rank = _RANK_USER if text.startswith("User:") else _RANK_DECISION
            lines.append(_Line(rank, text, order, _mentions(text, terms)))
            order += 1
    if has_facts:
        room = facts_chars - len("Facts: ")
        merged: list[str] = []
        for child, chars in zip(parsed, _shares(weights, room, 12), strict=True):
            if child.facts:
                merged += _fitting(partial(_child_facts, child), chars, len(child.facts), 2)
        lines.append(
            _Line(_RANK_FACTS, _fact_line(list(dict.fromkeys(merged)), facts_chars), order)
        )
    return _fit(lines, budget_chars, restore)
