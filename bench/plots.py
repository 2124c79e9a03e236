"""Draw the benchmark figures for docs/benchmarks.md from the bench scripts' JSON results.

    pip install -e ".[plots]"                 # matplotlib, an optional extra
    python bench/plots.py [--results bench/out] [--docs docs]

Reads (each written by the bench script named in the error if it is missing):
- latency.json     {"machine": str, "command": str,
                    "points": [{"op": str, "events": int, "p50_ms": float, "p95_ms": float}]}
- compaction.json  {"machine": str, "command": str, "context_length": int, "threshold_tokens": int,
                    "systems": {name: [{"turn": int, "tokens": int, "compacted": bool}]}}
- locomo.json      {"machine": str, "command": str, "metric": str,
                    "systems": {name: {category: float}}}
Writes docs/bench_latency.png, docs/bench_compaction.png, docs/bench_locomo.png. A figure whose
input is missing is skipped with a message; nothing is ever drawn from made-up numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SOURCES = {
    "latency.json": "bench/search_scale.py at several --messages sizes (each run adds its points)",
    "compaction.json": "bench/compaction_tokens.py",
    "locomo.json": "bench/locomo.py",
}


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / name
    if not path.exists():
        print(f"skip {name}: not found in {results} (run {SOURCES[name]} first)", file=sys.stderr)
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _footer(fig: Any, data: dict[str, Any]) -> None:
    note = " · ".join(x for x in (data.get("machine"), data.get("command")) if x)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="#555555")


def latency(plt: Any, data: dict[str, Any], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ops = sorted({p["op"] for p in data["points"]})
    for op in ops:
        pts = sorted((p for p in data["points"] if p["op"] == op), key=lambda p: p["events"])
        xs = [p["events"] for p in pts]
        (line,) = ax.plot(xs, [p["p50_ms"] for p in pts], marker="o", label=f"{op} p50")
        ax.plot(xs, [p["p95_ms"] for p in pts], ls="--", color=line.get_color(), label=f"{op} p95")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events in the store")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency against store size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _footer(fig, data)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = out / "bench_latency.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def compaction(plt: Any, data: dict[str, Any], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, turns in data["systems"].items():
        turns = sorted(turns, key=lambda t: t["turn"])
        (line,) = ax.plot([t["turn"] for t in turns], [t["tokens"] for t in turns], label=name)
        hits = [t for t in turns if t.get("compacted")]
        ax.scatter(
            [t["turn"] for t in hits], [t["tokens"] for t in hits], color=line.get_color(), s=18
        )
    if data.get("threshold_tokens"):
        ax.axhline(data["threshold_tokens"], color="#aa3333", ls=":", label="compaction threshold")
    if data.get("context_length"):
        ax.axhline(data["context_length"], color="#333333", ls="-.", label="context window")
    ax.set_xlabel("turn")
    ax.set_ylabel("prompt tokens sent")
    ax.set_title("Prompt tokens across a long chat (dots: compactions)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _footer(fig, data)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = out / "bench_compaction.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def locomo(plt: Any, data: dict[str, Any], out: Path) -> Path:
    systems = list(data["systems"])
    categories: list[str] = []
    for scores in data["systems"].values():
        categories += [c for c in scores if c not in categories]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / max(1, len(systems))
    for i, name in enumerate(systems):
        xs = [j + i * width for j in range(len(categories))]
        ax.bar(xs, [data["systems"][name].get(c, 0.0) for c in categories], width, label=name)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(categories))])
    ax.set_xticklabels(categories, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel(data.get("metric", "recall"))
    ax.set_title("Recall per LoCoMo category")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    _footer(fig, data)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = out / "bench_locomo.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs")
    args = ap.parse_args(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: pip install -e '.[plots]'", file=sys.stderr)
        return 2
    args.docs.mkdir(parents=True, exist_ok=True)
    drawn = 0
    for name, draw in (
        ("latency.json", latency),
        ("compaction.json", compaction),
        ("locomo.json", locomo),
    ):
        data = _load(args.results, name)
        if data is not None:
            print(draw(plt, data, args.docs))
            drawn += 1
    return 0 if drawn else 1


if __name__ == "__main__":
    sys.exit(main())
