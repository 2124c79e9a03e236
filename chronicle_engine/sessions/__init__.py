"""Sessions: an append-only tree of entries per conversation; the model's context is a projection."""
