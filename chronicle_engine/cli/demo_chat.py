"""The demo's scripted conversation: a long, realistic coding chat, generated deterministically.

Invariant: the same turns every run (no randomness, no clock), so the demo's output is stable.
Each turn is a person's request, the assistant's tool calls with their (long) results, and the
assistant's answer, as OpenAI-style wire messages, exactly as Hermes would hold them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Turn", "turns", "NEEDLE", "NEEDLE_QUERY"]

NEEDLE = "The staging database password rotates every 90 days; the vault path is kv/heron/staging."
NEEDLE_QUERY = "vault path staging"

_TOPICS = [
    ("rename the service to heron-api", "git mv services/api services/heron-api"),
    ("move the API port to 8443", "grep -rn 'port: 8080' config/"),
    ("add a health check at /healthz", "cat services/heron-api/routes.py"),
    ("find why the nightly job fails", "journalctl -u heron-nightly --since yesterday"),
    ("bump pydantic to 2.13 and fix the deprecations", "pip install -U pydantic==2.13.4"),
    ("write a migration adding orders.status", "alembic revision -m 'orders status'"),
    ("profile the slow /search endpoint", "py-spy record -o search.svg -- python app.py"),
    ("add retries to the payment client", "cat clients/payments.py"),
    ("set up the staging deploy", "kubectl get deploy -n staging"),
    ("document the release process", "cat docs/RELEASING.md"),
]


@dataclass(frozen=True)
class Turn:
    number: int
    user: dict[str, object]
    steps: tuple[dict[str, object], ...]  # assistant tool calls and their tool results
    answer: dict[str, object]

    @property
    def messages(self) -> list[dict[str, object]]:
        return [self.user, *self.steps, self.answer]


def _output(topic: str, n: int, lines: int = 150) -> str:
    rows = [
        f"{i:04d} {topic.split()[0]}: checked module_{(n * 7 + i) % 53}.py "
        f"(rev {(n * 131 + i * 17) % 9973:04x}) ok"
        for i in range(lines)
    ]
    return "\n".join(rows)


def turns(count: int = 48) -> Iterator[Turn]:
    for n in range(1, count + 1):
        topic, command = _TOPICS[(n - 1) % len(_TOPICS)]
        round_ = (n - 1) // len(_TOPICS) + 1
        request = f"Turn {n}: please {topic} (round {round_}). Keep the changelog up to date."
        if n == 3:
            request += " Also, for later: " + NEEDLE
        user: dict[str, object] = {"role": "user", "content": request}
        call_id = f"call_{n:03d}"
        call: dict[str, object] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "terminal", "arguments": json.dumps({"command": command})},
                }
            ],
        }
        result: dict[str, object] = {
            "role": "tool",
            "tool_call_id": call_id,
            "content": _output(topic, n),
        }
        answer: dict[str, object] = {
            "role": "assistant",
            "content": f"Done with turn {n}: I ran `{command}` and the change to {topic} is in "
            f"place; changelog entry {n} added.",
        }
        yield Turn(n, user, (call, result), answer)
