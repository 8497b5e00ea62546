"""Compaction: the pure engine (model, planning, projection, engine), its policy, summary
and extractive summarizer; and apart from them the stateful side (stored policies,
requests, the worker, the commit, the summarizers that call providers, the triggers)."""
