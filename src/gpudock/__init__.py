"""gpudock: a GPU cluster manager for Docker containers."""

from gpudock._native import guard as _guard

_guard()  # compiled hot modules only while they match their source (``_native``)

__version__ = "0.1.0"
