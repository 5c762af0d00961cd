"""Speed-ups of the reference scheduler, behind ``scheduler/acceleration.py``'s ``Accelerator``.

``index``, ``catalog`` and ``indexed``: the capacity index, which answers steps 3b and 4
from buckets of nodes by free capacity (``indexed.CapacityIndex``, named by
``registry.ACCELERATOR``). Only the registry and the session import this package;
policies never do.
"""
