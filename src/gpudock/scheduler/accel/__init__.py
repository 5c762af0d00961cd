"""Speed-ups of the reference scheduler, behind ``scheduler/acceleration.py``'s ``Accelerator``.

``indexed.CapacityIndex`` (named by ``registry.ACCELERATOR``) answers steps 3b and 4
from buckets of nodes by free capacity (``index``, ``priced_shares``, ``catalog``; the
verdicts in ``indexed``, ``verdicts``, ``cpu_verdicts``, ``walks``, and ``extra`` for the
filters it does not know) and step 5 from a best-first victim search (``victims``,
``boards``). Only the registry, the session and this package's tests import it;
policies never do.
"""
