"""The session tree's vocabulary, below both of its writers: the session events, a path of
entries read from the fold's tables, and the summary of an abandoned branch.

Capture writes tree entries (messages, branch summaries) and `sessions` folds and reads them;
both import this package and neither imports the other's internals.
"""
