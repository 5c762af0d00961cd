"""The scheduler: a pure function from a ``Snapshot`` to a ``Plan``.

It performs no I/O and reads no clock: time arrives in ``Snapshot.now``. The
applier (``gpudock.store.applier``) commits a Plan; the simulator reuses the
same function unchanged.
"""
