"""Chronicle against Hermes' built-in ContextCompressor on the same long scripted conversation.

    .venv/bin/python bench/vs_builtin.py [--turns 600] [--window 128000] [--out-of-the-box]

One conversation (requests, tool calls with outputs, answers; a planted fact every few turns, in
a request, a tool output or an answer) is played through three engines under the same
`compression:` settings and the same trigger (the host's rough token count after each turn):

- Hermes' built-in `ContextCompressor`, its summary model scripted (no network): the scripted
  model keeps what a careful summariser under the same token budget would (each request's
  opening, every decision line, the previous summary first) and drops what does not fit;
- Chronicle with its extractive summariser (no model);
- Chronicle with the same scripted model behind its pinned model port.

With `--out-of-the-box` Chronicle gets no `compression:` section at all (the built-in compressor
still gets Hermes' defaults): what a user who never configured anything sees.

It prints model calls, compression time (seconds, to the millisecond: the extractive row's six
passes take about 0.1 s, where one step of 10 ms was a change of 10%), the tokens left after the
last pass, and how many planted facts are still recoverable: in the final context, or (Chronicle)
through the tools, by chronicle_expand over the sections the handoff cites and by
chronicle_search.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import agent.context_compressor as builtin_module  # noqa: E402
from agent.model_metadata import estimate_messages_tokens_rough  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from test_compaction_support import core_for, load_plugin  # noqa: E402

from chronicle_engine.chronicle.writers import ModelWriter  # noqa: E402
from chronicle_engine.compaction.handoff import cited, label_of  # noqa: E402
from chronicle_engine.config import Config  # noqa: E402
from chronicle_engine.messages import content_text, is_own_handoff  # noqa: E402

SETTINGS = {"threshold": 0.5, "target_ratio": 0.2, "protect_first_n": 3, "protect_last_n": 20}
NOUNS = ("vault", "staging", "billing", "mirror", "ledger", "router", "archive", "gateway")


# -- the conversation -------------------------------------------------------------------------


def _filler(n: int, seed: int) -> str:
    words = [
        "checked",
        "the",
        "service",
        "logs",
        "and",
        "the",
        "config",
        "then",
        "compared",
        "latency",
        "with",
        "the",
        "baseline",
    ]
    return " ".join(words[(seed + k) % len(words)] for k in range(n))


def conversation(turns: int, every: int) -> tuple[list[list[dict[str, Any]]], dict[str, str]]:
    """Turns of messages, and the planted facts: {question noun: exact value}."""
    out: list[list[dict[str, Any]]] = []
    facts: dict[str, str] = {}
    for t in range(turns):
        fact = None
        if t % every == 0:
            k = t // every
            noun = f"{NOUNS[k % len(NOUNS)]}-{k}"
            value = f"Q{k:03d}X{(k * 7919) % 10000:04d}"
            facts[noun] = value
            fact = (k % 3, noun, value)
        user = f"Turn {t}: please check service-{t} and report. " + _filler(90, t)
        if fact and fact[0] == 0:
            user = f"Turn {t}: note for later, the {fact[1]} code is {fact[2]}. " + _filler(60, t)
        output = f"exit 0\n{_filler(120, t * 3)}\n"
        if fact and fact[0] == 1:
            output += f"config: {fact[1]}_token={fact[2]}\n"
        output += _filler(120, t * 5)
        answer = f"Decided: service-{t} is fine, latency {40 + t % 50} ms. " + _filler(80, t * 7)
        if fact and fact[0] == 2:
            answer = f"Service-{t} checked. The {fact[1]} id is {fact[2]}, kept as is. " + _filler(
                70, t
            )
        call = f"call_{t}"
        out.append(
            [
                {"role": "user", "content": user},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {
                                "name": "terminal",
                                "arguments": json.dumps(
                                    {"command": f"tail -200 /var/log/service-{t}.log"}
                                ),
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call, "content": output},
                {"role": "assistant", "content": answer},
            ]
        )
    return out, facts


# -- the scripted summary model ---------------------------------------------------------------


def scripted_summary(source: str, budget_chars: int, previous: str = "") -> str:
    """What a careful summariser under a budget keeps: the previous summary, each request's
    opening, every decision; the oldest lines go first when it does not fit."""
    lines = [ln for ln in previous.splitlines() if ln.strip()]
    for block in re.split(r"\n(?=\[(?:USER|ASSISTANT|TOOL|user|assistant|tool))", source):
        head = block.strip()
        if head.upper().startswith("[USER"):
            lines.append("- asked: " + " ".join(head.split(":", 1)[-1].split())[:160])
        elif "Decided" in head:
            lines.append("- decided: " + " ".join(head[head.index("Decided") :].split())[:160])
    while lines and sum(len(ln) + 1 for ln in lines) > budget_chars:
        lines.pop(0)
    return "\n".join(lines) or "- nothing to report"


class BuiltinModel:
    """Stands in for `call_llm(task="compression", ...)` inside the built-in compressor."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, **kwargs: Any) -> Any:
        self.calls += 1
        prompt = kwargs["messages"][-1]["content"]
        budget = int(re.search(r"Target ~(\d+) tokens", prompt).group(1)) * 4  # type: ignore[union-attr]
        previous = ""
        if "PREVIOUS SUMMARY:" in prompt:
            previous = prompt.split("PREVIOUS SUMMARY:", 1)[1].split(
                "NEW TURNS TO INCORPORATE:", 1
            )[0]
            source = prompt.split("NEW TURNS TO INCORPORATE:", 1)[1]
        else:
            source = prompt.split("TURNS TO SUMMARIZE:", 1)[1]
        source = re.split(
            r"\n\n(?:Update the summary|Use this exact structure|MEMORY PROVIDER)", source
        )[0]
        text = scripted_summary(source, budget, previous)
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=text))])


def chronicle_model(counter: list[int]) -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        counter[0] += 1
        prompt = "\n".join(
            str(getattr(part, "content", "")) for m in messages for part in getattr(m, "parts", [])
        )
        budget = int(re.search(r"at most (\d+) characters", prompt).group(1))  # type: ignore[union-attr]
        source = prompt.split("CONVERSATION:", 1)[-1].split("RECORDS:", 1)[-1]
        source = re.sub(
            r"^\[(user|assistant|tool)\] ",
            lambda m: f"[{m.group(1).upper()}]: ",
            source,
            flags=re.M,
        )
        return ModelResponse(parts=[TextPart(scripted_summary(source, budget))])

    return FunctionModel(answer, model_name="scripted")


# -- playing the conversation -----------------------------------------------------------------


def play(engine: Any, turns: list[list[dict[str, Any]]], capture: Any = None) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    spent = 0.0
    passes = 0
    after: list[int] = []
    for turn in turns:
        messages.extend(turn)
        if capture is not None:
            capture(messages)  # the memory slot's sync_turn
        tokens = estimate_messages_tokens_rough(messages)
        engine.update_from_response({"prompt_tokens": tokens, "completion_tokens": 0})
        if engine.should_compress(tokens):
            started = time.perf_counter()
            compressed = engine.compress(messages, current_tokens=tokens)
            spent += time.perf_counter() - started
            if compressed != messages:
                passes += 1
                messages = compressed
                after.append(estimate_messages_tokens_rough(messages))
                engine.update_from_response({"prompt_tokens": after[-1], "completion_tokens": 0})
    return {
        "messages": messages,
        "seconds": spent,
        "passes": passes,
        "after": round(sum(after) / len(after)) if after else 0,
    }


def in_context(messages: list[dict[str, Any]], value: str) -> bool:
    return any(
        value in content_text(m) or value in json.dumps(m.get("tool_calls") or "") for m in messages
    )


def run_builtin(
    turns: list[list[dict[str, Any]]], facts: dict[str, str], window: int
) -> dict[str, Any]:
    model = BuiltinModel()
    original = builtin_module.call_llm
    builtin_module.call_llm = model  # type: ignore[assignment]
    try:
        engine = builtin_module.ContextCompressor(
            model="scripted",
            threshold_percent=SETTINGS["threshold"],
            protect_first_n=SETTINGS["protect_first_n"],
            protect_last_n=SETTINGS["protect_last_n"],
            summary_target_ratio=SETTINGS["target_ratio"],
            quiet_mode=True,
            config_context_length=window,
            provider="custom",
            base_url="http://127.0.0.1:9",
        )
        result = play(engine, turns)
    finally:
        builtin_module.call_llm = original  # type: ignore[assignment]
    final = result["messages"]
    found = sum(1 for v in facts.values() if in_context(final, v))
    return {
        "engine": "Hermes built-in ContextCompressor (scripted summary model)",
        "passes": result["passes"],
        "model_calls": model.calls,
        "seconds": result["seconds"],
        "tokens_after": result["after"],
        "in_context": found,
        "recoverable": found,
    }


def run_chronicle(
    turns: list[list[dict[str, Any]]],
    facts: dict[str, str],
    window: int,
    *,
    with_model: bool,
    configured: bool = True,
) -> dict[str, Any]:
    module = __import__(load_plugin().__name__ + ".context", fromlist=["ChronicleContextEngine"])
    with tempfile.TemporaryDirectory() as tmp:
        settings = SETTINGS if configured else None  # None: Hermes' own defaults apply
        core = core_for(Path(tmp) / "chronicle.db", Config(compression=settings))
        counter = [0]
        if with_model:
            core.compaction.writer = ModelWriter(
                lambda: chronicle_model(counter),
                core.store,
                core.types,
                timeout=30,
                name="scripted",
            )
        engine = module.ChronicleContextEngine(core=core)
        engine.update_model(model="scripted", context_length=window)
        engine.on_session_start("bench", platform="cli")
        result = play(engine, turns, capture=lambda ms: core.capture.capture_messages("bench", ms))
        final = result["messages"]
        reachable: set[str] = set()
        handoff = next((m for m in final if is_own_handoff(m)), None)
        for level, section_id, _lo, _hi in cited(content_text(handoff) if handoff else ""):
            page = 1
            while True:
                out = json.loads(
                    engine.handle_tool_call(
                        "chronicle_expand",
                        {"section_id": label_of(level, section_id), "page": page, "page_size": 200},
                        messages=final,
                    )
                )
                reachable.update(json.dumps(item["message"]) for item in out.get("messages", []))
                if "next" not in out:
                    break
                page = out["next"]["page"]
        blob = "\n".join(reachable)
        found_context = found_tools = found_search = 0
        for noun, value in facts.items():
            ctx = in_context(final, value)
            found_context += ctx
            if ctx or value in blob:
                found_tools += 1
            try:
                hits = core.recall.search(f"{noun} code id token", session_id="bench", limit=5)
                found_search += any(value in json.dumps(h) for h in hits)
            except Exception:  # recall is the memory slot's; the bench still reports the rest
                pass
        row = {
            "engine": "Chronicle, "
            + ("scripted model via the pinned port" if with_model else "extractive (no model)"),
            "passes": result["passes"],
            "model_calls": counter[0],
            "seconds": result["seconds"],
            "tokens_after": result["after"],
            "in_context": found_context,
            "recoverable": found_tools,
            "search_top5": found_search,
        }
        core.shutdown()
        return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--every", type=int, default=6, help="plant a fact every N turns")
    parser.add_argument("--window", type=int, default=128_000)
    parser.add_argument(
        "--out-of-the-box",
        action="store_true",
        help="Chronicle without a compression: section (Hermes' defaults read from the host)",
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the engines' own progress lines are not the result
    turns, facts = conversation(args.turns, args.every)
    total = estimate_messages_tokens_rough([m for t in turns for m in t])
    print(f"machine: {platform.machine()} cpus={os.cpu_count()} python={platform.python_version()}")
    print(
        f"conversation: {args.turns} turns, {4 * args.turns} messages, ~{total:,} tokens, "
        f"{len(facts)} planted facts; window {args.window:,}; compression: {SETTINGS}"
        + (" (Chronicle: no compression: section)" if args.out_of_the_box else "")
    )
    configured = not args.out_of_the_box
    rows = [
        run_builtin(turns, facts, args.window),
        run_chronicle(turns, facts, args.window, with_model=False, configured=configured),
        run_chronicle(turns, facts, args.window, with_model=True, configured=configured),
    ]
    print()
    print(
        "| engine | passes | model calls | compress time (s) | tokens after a pass (mean) "
        "| facts in final context | facts recoverable | found by chronicle_search (top 5) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        search = r.get("search_top5")
        print(
            f"| {r['engine']} | {r['passes']} | {r['model_calls']} | {r['seconds']:.3f} | {r['tokens_after']:,} | "
            f"{r['in_context']}/{len(facts)} | {r['recoverable']}/{len(facts)} | "
            f"{'-' if search is None else f'{search}/{len(facts)}'} |"
        )


if __name__ == "__main__":
    main()
