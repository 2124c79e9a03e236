"""Capture: every message of every turn into the log, once, with who said what."""
