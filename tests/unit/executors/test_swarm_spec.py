"""The Swarm executor's pure parts: a job attempt as service specs, tasks as a status, nodes.

No engine: the inputs are the shapes Docker 20.10's API returned on the kit's
swarm (``tests/kit/swarm.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpudock.config import ExecutorConfig, SwarmConfig
from gpudock.executors._swarm_spec import (
    Hardening,
    api_at_least,
    engine_nodes,
    gang_status,
    service_spec,
)
from gpudock.executors.base import ContainerState, LaunchRequest, Member

MiB = 1024 * 1024


def request(**fields: Any) -> LaunchRequest:
    fields.setdefault("node", "sw2")
    return LaunchRequest(
        job_id=7,
        attempt=2,
        name="gpudock-i-7-a2",
        image="img:1",
        command=["python", "x.py"],
        env=fields.pop("env", {"A": "1"}),
        gpu_uuids=fields.pop("gpu_uuids", ("GPU-a", "GPU-b")),
        **fields,
    )


def spec(req: LaunchRequest, member: Member | None = None, **config: Any) -> dict[str, Any]:
    member = member or Member(0, "sw2", req.gpu_uuids)
    executor = ExecutorConfig.model_validate(config)
    return service_spec(req, member, executor, SwarmConfig(), "inst", "NODEID", Hardening())


def env_of(service: dict[str, Any]) -> dict[str, str]:
    return dict(e.split("=", 1) for e in service["TaskTemplate"]["ContainerSpec"]["Env"])


def test_an_attempt_is_a_run_once_job_pinned_to_its_node_with_exactly_its_gpus() -> None:
    service = spec(request(cpus=1.5, memory=512 * MiB))
    task = service["TaskTemplate"]
    assert service["Name"] == "gpudock-i-7-a2"
    assert service["Mode"] == {"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}}
    assert task["RestartPolicy"]["Condition"] == "none"
    assert task["Placement"]["Constraints"] == ["node.id==NODEID"]
    env = env_of(service)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-a,GPU-b" and env["GPUDOCK_GPUS"] == "GPU-a,GPU-b"
    assert env["A"] == "1" and env["GPUDOCK_ATTEMPT"] == "2"
    assert task["ContainerSpec"]["Args"] == ["python", "x.py"]  # the image's entrypoint stays
    assert "Command" not in task["ContainerSpec"]
    assert task["Resources"]["Limits"] == {
        "NanoCPUs": 1_500_000_000,
        "MemoryBytes": 512 * MiB,
        "Pids": 4096,
    }
    for labels in (service["Labels"], task["ContainerSpec"]["Labels"]):
        assert labels["gpudock.job"] == "7" and labels["gpudock.attempt"] == "2"
        assert labels["gpudock.instance"] == "inst" and labels["gpudock.name"] == "gpudock-i-7-a2"
        assert labels["gpudock.node"] == "sw2" and labels["gpudock.gpus"] == "GPU-a,GPU-b"
    assert "EndpointSpec" not in service and "Networks" not in task


def test_a_cpu_only_job_sees_no_gpu_even_with_nvidia_as_the_default_runtime() -> None:
    env = env_of(spec(request(gpu_uuids=()), Member(0, "sw2", ())))
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_every_hardening_option_swarm_can_express_is_set() -> None:
    service = spec(
        request(shm_size=64 * MiB),
        user="1000:1000",
        read_only_rootfs=True,
        cap_add=["NET_BIND_SERVICE"],
        stop_grace="7s",
    )
    container = service["TaskTemplate"]["ContainerSpec"]
    assert container["CapabilityDrop"] == ["ALL"] and container["CapabilityAdd"] == [
        "NET_BIND_SERVICE"
    ]
    assert container["Init"] is True and container["ReadOnly"] is True
    assert container["User"] == "1000:1000"
    assert container["Privileges"] == {"NoNewPrivileges": True}
    assert container["StopGracePeriod"] == 7_000_000_000
    assert container["Mounts"] == [
        {"Type": "tmpfs", "Target": "/dev/shm", "TmpfsOptions": {"SizeBytes": 64 * MiB}}
    ]
    logs = service["TaskTemplate"]["LogDriver"]
    assert logs == {"Name": "json-file", "Options": {"max-size": str(50 * MiB), "max-file": "3"}}


def test_no_new_privileges_is_left_out_where_the_engine_cannot_take_it() -> None:
    member = Member(0, "sw2", ("GPU-a",))
    old = service_spec(
        request(),
        member,
        ExecutorConfig(),
        SwarmConfig(),
        "inst",
        "N",
        Hardening(no_new_privileges=False),
    )
    assert "Privileges" not in old["TaskTemplate"]["ContainerSpec"]
    assert api_at_least("1.44", (1, 44)) and not api_at_least("1.41", (1, 44))
    assert not api_at_least("garbage", (1, 44))


def test_gang_members_get_the_rendezvous_variables_and_a_dnsrr_overlay() -> None:
    members = (Member(0, "sw1", ("GPU-a", "GPU-b")), Member(1, "sw3", ("GPU-c", "GPU-d")))
    req = request(members=members)
    rank1 = spec(req, members[1])
    env = env_of(rank1)
    assert rank1["Name"] == "gpudock-i-7-a2-r1"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-c,GPU-d"  # this member's own GPUs only
    assert {
        k: env[k]
        for k in (
            "NNODES",
            "NODE_RANK",
            "LOCAL_WORLD_SIZE",
            "WORLD_SIZE",
            "RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
        )
    } == {
        "NNODES": "2",
        "NODE_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "WORLD_SIZE": "4",
        "RANK": "2",
        "MASTER_ADDR": "gpudock-i-7-a2-r0",
        "MASTER_PORT": "29500",
    }
    assert rank1["EndpointSpec"] == {"Mode": "dnsrr"}
    assert rank1["TaskTemplate"]["Networks"] == [{"Target": "gpudock-i-7-a2-net"}]
    assert rank1["Labels"]["gpudock.rank"] == "1" and rank1["Labels"]["gpudock.node"] == "sw3"


def task(
    state: str, code: int | None = None, err: str | None = None, at: str = ""
) -> dict[str, Any]:
    status: dict[str, Any] = {"State": state, "Timestamp": at or "2026-01-01T00:00:01Z"}
    if code is not None:
        status["ContainerStatus"] = {"ContainerID": "c" * 64, "ExitCode": code}
    if err is not None:
        status["Err"] = err
    return {"Status": status, "Version": {"Index": 1}}


LABELS = {"gpudock.job": "7", "gpudock.attempt": "2"}


@pytest.mark.parametrize(
    ("state", "code", "err", "expected", "exit_code"),
    [
        ("preparing", None, None, ContainerState.CREATED, None),
        ("running", 0, None, ContainerState.RUNNING, None),
        ("complete", 0, None, ContainerState.EXITED, 0),
        ("failed", 3, "task: non-zero exit (3)", ContainerState.EXITED, 3),
        ("shutdown", 143, None, ContainerState.EXITED, 143),
        ("rejected", None, "No such image: x", ContainerState.DEAD, None),
        ("failed", 0, "starting container failed: unknown device", ContainerState.DEAD, None),
        ("orphaned", None, None, ContainerState.DEAD, None),
    ],
)
def test_a_tasks_state_is_a_container_state(
    state: str, code: int | None, err: str | None, expected: ContainerState, exit_code: int | None
) -> None:
    status = gang_status("n", [(0, "sw1", task(state, code, err))], LABELS)
    assert status.state is expected and status.exit_code == exit_code
    assert status.id == "n" and status.job_id == 7 and status.attempt == 2
    if state == "failed" and code == 3:
        assert status.error is None  # the exit code says it; Swarm's words add nothing


def test_a_gang_fails_as_soon_as_one_member_fails_and_says_which() -> None:
    members = [
        (0, "sw1", task("running", 0)),
        (1, "sw3", task("failed", 2, "task: non-zero exit (2)")),
    ]
    status = gang_status("g", members, LABELS)
    assert status.state is ContainerState.EXITED and status.exit_code == 2
    assert status.error == "rank 1 on node sw3: exited with code 2"
    done = [(0, "sw1", task("complete", 0)), (1, "sw3", task("running", 0))]
    assert gang_status("g", done, LABELS).state is ContainerState.RUNNING
    starting = [(0, "sw1", task("running", 0)), (1, "sw3", task("assigned"))]
    assert gang_status("g", starting, LABELS).state is ContainerState.CREATED
    gone = [(0, "sw1", task("complete", 0)), (1, "sw3", None)]
    assert "rank 1 on node sw3" in (gang_status("g", gone, LABELS).error or "")


def node(node_id: str, hostname: str, **extra: Any) -> dict[str, Any]:
    labels = extra.pop("engine_labels", {})
    return {
        "ID": node_id,
        "Spec": {"Availability": extra.pop("availability", "active"), "Labels": {"zone": "a"}},
        "Status": {"State": extra.pop("state", "ready"), "Addr": "10.0.0.1"},
        "Description": {
            "Hostname": hostname,
            "Engine": {"Labels": labels},
            "Resources": {
                "NanoCPUs": 8_000_000_000,
                "MemoryBytes": 64 * 1024**3,
                "GenericResources": [
                    {"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": "GPU-2"}},
                    {"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": "GPU-1"}},
                    {"DiscreteResourceSpec": {"Kind": "SSD", "Value": 1}},
                ],
            },
        },
        **extra,
    }


def test_nodes_are_named_by_label_else_by_host_and_keep_their_gpus_in_order() -> None:
    nodes = engine_nodes(
        [
            node(
                "aaaaaaaaaaaaaaaa", "gpu-1", engine_labels={"gpudock.node": "big"}, ManagerStatus={}
            ),
            node("bbbbbbbbbbbbbbbb", "gpu-2", state="down", availability="drain"),
            node("cccccccccccccccc1", "vm"),
            node("dddddddddddddddd2", "vm"),
        ]
    )
    assert [n.name for n in nodes] == ["big", "gpu-2", "vm-cccccccccccc", "vm-dddddddddddd"]
    first = nodes[0]
    assert first.manager and first.ready and first.gpus == ("GPU-2", "GPU-1")
    assert (first.cpus, first.memory, first.labels) == (8.0, 64 * 1024**3, {"zone": "a"})
    assert (nodes[1].state, nodes[1].availability, nodes[1].ready) == ("down", "drain", False)
