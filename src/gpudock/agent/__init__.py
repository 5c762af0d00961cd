"""The node agent (``gpudock agent``): one per Swarm node, as a host process or a global service.

::

    gpudock agent --server URL --token T
      │
      ├─ every interval: list the node's gpudock containers (its Docker engine)
      │                  read NVML (GPUs, health, readings)
      │                  POST /v1/agent/sync ──► orders: kill / remove, lease, nonce, held GPUs
      │                  kill and remove what the orders say
      ├─ lease: no server and no Swarm manager for ``lease`` s ──► stop every gpudock
      │         container of the node by itself (its engine gone too: SIGKILL their init)
      ├─ GET :9471/metrics: the node's gpu_* gauges (the server's families and labels)
      └─ node services (``agent/node.py``): per-node checks that need the node's own
         processes run beside the loop, one module plus one line in ``NODE_SERVICES``

Modules: ``protocol`` (what agent and server say), ``runner`` (the loop),
``engine`` (the node's containers, and killing them), ``gpus`` (NVML),
``metrics`` (the gauges), ``node`` (node services).
"""
