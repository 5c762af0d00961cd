"""The node agent as a Swarm global service (``gpudock swarm deploy-agent IMAGE``).

One task on every node: the image's entrypoint is ``gpudock`` (see
``deploy/agent/Dockerfile``); the task runs ``gpudock agent``, reaches the
node's engine through its socket, sees the node's GPUs through the NVIDIA
runtime (``NVIDIA_VISIBLE_DEVICES=all``, capability ``utility``), serves its
gauges on the node's own network (the ``host`` network) and holds the
enrollment token as a Swarm secret. Swarm fills in the task's own task and
node ids (``{{.Task.ID}}``, ``{{.Node.ID}}``), which it shows the server
to get its node's token (``services/agent.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

import docker.errors

LABEL_AGENT = "gpudock.agent"  # the instance the agent service (and its secrets) belong to
SECRET_FILE = "/run/secrets/gpudock-agent-enroll"
LIVE = {"new", "pending", "assigned", "accepted", "preparing", "ready", "starting", "running"}


def service_name(instance: str) -> str:
    return f"gpudock-agent-{instance}"


def agent_spec(
    instance: str, image: str, server_url: str, secret_id: str, secret_name: str, socket: str
) -> dict[str, Any]:
    """The ``POST /services/create`` body of the agent's global service (``socket``: the
    node's engine socket on each host, mounted at ``/var/run/docker.sock``)."""
    container = {
        "Image": image,
        "Args": ["agent", "--server", server_url, "--enroll-file", SECRET_FILE],
        "Env": [
            "GPUDOCK_NODE_ID={{.Node.ID}}",
            "GPUDOCK_TASK_ID={{.Task.ID}}",
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=utility",
        ],
        "Labels": {LABEL_AGENT: instance},
        "Mounts": [{"Type": "bind", "Source": socket, "Target": "/var/run/docker.sock"}],
        "Secrets": [
            {
                "SecretID": secret_id,
                "SecretName": secret_name,
                "File": {"Name": "gpudock-agent-enroll", "UID": "0", "GID": "0", "Mode": 0o400},
            }
        ],
        "Init": True,
    }
    return {
        "Name": service_name(instance),
        "Labels": {LABEL_AGENT: instance},
        "TaskTemplate": {
            "ContainerSpec": container,
            "RestartPolicy": {"Condition": "any", "Delay": 5_000_000_000},
            "Networks": [{"Target": "host"}],
        },
        "Mode": {"Global": {}},
    }


def deploy_agent(
    api: Any, instance: str, image: str, server_url: str, token: str, socket: str
) -> str:
    """Create or update the agent service with a fresh secret holding ``token``."""
    digest = hashlib.sha256(token.encode()).hexdigest()[:12]
    secret_name = f"gpudock-agent-enroll-{instance}-{digest}"
    secret = api.create_secret(secret_name, token.encode(), labels={LABEL_AGENT: instance})
    spec = agent_spec(instance, image, server_url, secret["ID"], secret_name, socket)
    try:
        current = api.inspect_service(service_name(instance))
    except docker.errors.NotFound:
        current = None
    if current is None:
        response = api._post_json(api._url("/services/create"), data=spec)
    else:
        response = api._post_json(
            api._url("/services/{0}/update", current["ID"]),
            params={"version": current["Version"]["Index"]},
            data=spec,
        )
    api._raise_for_status(response)
    for old in api.secrets(filters={"label": f"{LABEL_AGENT}={instance}"}):
        if old["ID"] != secret["ID"]:
            with contextlib.suppress(docker.errors.APIError):  # in use until tasks restart
                api.remove_secret(old["ID"])
    return service_name(instance)


def agent_task_node(api: Any, instance: str, task_id: str) -> str | None:
    """The node id of agent task ``task_id`` if it is a live task of the agent service."""
    try:
        task = api.inspect_task(task_id)
        service = api.inspect_service(service_name(instance))
    except docker.errors.NotFound:
        return None
    state = (task.get("Status") or {}).get("State")
    if task.get("ServiceID") != service["ID"] or state not in LIVE:
        return None
    node = task.get("NodeID")
    return str(node) if node else None
