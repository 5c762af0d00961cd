"""Domain types shared by every layer: jobs, inventory, units and errors.

Nothing in ``core`` performs I/O; every other package may import it.
"""
