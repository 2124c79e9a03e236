"""Recall: search, per-turn memory, beliefs and the memory tools over the captured log."""
