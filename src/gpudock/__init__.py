"""gpudock: a GPU cluster manager for Docker containers."""

__version__ = "0.1.0"
