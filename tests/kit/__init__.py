"""Test kit: builders, harnesses and helpers for real components (see TESTING.md)."""
