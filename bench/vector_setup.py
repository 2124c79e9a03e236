"""Vectors for the recall benches: the settings that turn them on, and embedding a whole
captured dataset before the questions are asked.

Chronicle embeds in the background (a few dozen messages per `queue_prefetch`); a bench asks
its questions right after the capture, so it embeds everything first. `VECTOR_SCAN` covers a
whole conversation (LoCoMo) or haystack (LongMemEval), so every captured turn can be a nearest
neighbour; the default setting compares the 500 newest.
"""

from __future__ import annotations

import argparse

from chronicle_engine.config import Config
from chronicle_engine.core import ChronicleCore

MODEL = "all-MiniLM-L6-v2"
VECTOR_SCAN = 2000


def vector_settings(url: str) -> dict[str, object]:
    """The `chronicle:` settings of a bench run with vectors from the server at `url`."""
    return {
        "recall": {
            "embeddings": {"url": url, "model": MODEL, "timeout_s": 3600},
            "vector_scan": VECTOR_SCAN,
        }
    }


def vector_config(url: str) -> Config:
    return Config(vector_settings(url))


def embed_everything(core: ChronicleCore, batch: int = 256) -> int:
    """Embed every captured message that has no vector yet; returns how many were embedded."""
    total = 0
    while True:
        done = core.recall.embed_pending(limit=batch)
        if not done:
            return total
        total += done


def add_embeddings_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--embeddings",
        default="",
        metavar="URL",
        help="an OpenAI-compatible embedding endpoint (bench/embed_server.py): the protocol "
        "variant searches with vectors (fused with full text in a search by session; after "
        "full text when it leaves places in a plain search)",
    )
