"""Compaction: the context-engine slot's work, folding old turns into chronicle sections.

Data flow: `policy` decides when and how far; `planner` decides, purely, what stays verbatim and
what is folded; `extractive`/`summarizer` write a section's prose; `handoff` renders the one
message that stands for the folded past; `engine.Compaction` ties them to the log, the chronicle
and the session tree; `tools` lets the agent expand any section back to its original messages.
"""
