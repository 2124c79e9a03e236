"""A condensed handoff covers the whole conversation in proportion: each condensed level keeps a
line for every child and facts in proportion to the range each child covers, so however many
levels deep, every part of the conversation keeps its share of the names it held."""

from __future__ import annotations

from chronicle_engine.chronicle.extractive import condense_prose


def _part(k: int, lo: int, hi: int) -> tuple[str, str]:
    """A level-1 section's prose over lo..hi naming tickets T-<k>-<j> (and a host every part
    names), with one request line."""
    facts = ", ".join([f"T-{k}-{j}" for j in range(12)] + ["db-1"])
    return f"{lo}-{hi}", f"User: request {k}: look into ticket T-{k}-0\nFacts: {facts}"


def test_every_child_keeps_a_line_and_facts_in_proportion_to_its_range() -> None:
    children = [_part(k, 100 * k + 1, 100 * k + 100) for k in range(10)]
    prose = condense_prose(children, budget_chars=1600)
    assert len(prose) <= 1600
    for k in range(10):
        assert f"[{100 * k + 1}-{100 * k + 100}]" in prose
        assert f"T-{k}-" in prose
    # A child covering nine times the range of another keeps more of its names.
    wide = [("1-900", _part(0, 1, 900)[1]), ("901-1000", _part(1, 901, 1000)[1])]
    prose = condense_prose(wide, budget_chars=600)
    facts = prose.split("Facts:")[1]
    assert facts.count("T-0-") > facts.count("T-1-") >= 1


def test_forty_levels_deep_every_tenth_of_the_conversation_is_still_named() -> None:
    """The shape of a long life: each level condenses the previous top with a few newer parts."""
    top: tuple[str, str] | None = None
    lo = 1
    parts = 0
    for level in range(2, 42):
        fresh = []
        for _ in range(3):
            fresh.append(_part(parts, lo, lo + 149))
            lo += 150
            parts += 1
        children = ([top] if top else []) + fresh
        prose = condense_prose(children, budget_chars=3000)
        assert len(prose) <= 3000
        top = (f"L{level}:1-{lo - 1}", prose)
    assert top is not None
    named = [k for k in range(parts) if f"T-{k}-" in top[1]]
    tenths = {k * 10 // parts for k in named}
    assert tenths == set(range(10)), sorted(tenths)
    # No tenth holds more than three times its share of the parts named.
    per_tenth = [sum(1 for k in named if k * 10 // parts == d) for d in range(10)]
    assert max(per_tenth) <= 3 * len(named) / 10, per_tenth
