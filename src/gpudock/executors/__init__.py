"""Executors run allocated jobs as containers. ``docker`` is the first backend."""
