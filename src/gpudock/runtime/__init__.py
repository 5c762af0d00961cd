"""The server's moving parts: scheduling loop, launcher and reconciler.

::

    submit ─► store (PENDING) ─► wake ─► schedule(snapshot) ─► applier ─► ALLOCATED
                                                                           │
          reconciler (periodic) ◄── executor (Docker) ◄── launcher ◄───────┘
          adopts, finishes, loses,      containers        STARTING → RUNNING
          stops orphans
"""
