"""Trace-driven simulator: replays a cluster trace through the real scheduler on a virtual clock."""
