"""Chaos suite for raftcron: real node processes in network namespaces, nemeses, a fenced
side-effect sink, one JSONL history, and an offline checker (`python -m chaos`)."""
