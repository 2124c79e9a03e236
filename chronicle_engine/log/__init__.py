"""The event log: typed events, the SQLite store, folds and the projector, pinned model calls."""
