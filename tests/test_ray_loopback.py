"""A local Ray cluster (`indexer ingest --ray` without an address) listens on 127.0.0.1 only: nothing
outside the machine can reach its servers. A start that fails under load is retried once, then
reported in one line."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")

from indexer import distributed  # noqa: E402
from indexer.distributed import RayUnavailable, connect  # noqa: E402

LOOPBACK_V4, LOOPBACK_V6 = "0100007F", "0000000000000000FFFF00000100007F"  # /proc/net/tcp spells 127.0.0.1 so


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(name))
    todo, found = [root], set()
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def listening_hosts(pids: set[int]) -> set[str]:
    """The hosts (as /proc/net/tcp writes them) that ``pids`` listen on over TCP."""
    sockets = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    sockets.add(target[len("socket:["):-1])
        except OSError:  # a worker that exited meanwhile
            continue
    hosts = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in sockets:  # 0A: LISTEN
                    hosts.add(fields[1].rsplit(":", 1)[0])
    return hosts


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's /proc")
def test_local_cluster_listens_on_loopback_only(monkeypatch):
    monkeypatch.setenv("RAY_memory_monitor_refresh_ms", "0")
    assert not ray.is_initialized()
    r, connected = connect(None)
    try:
        assert connected
        assert {n["NodeManagerAddress"] for n in r.nodes()} == {"127.0.0.1"}
        hosts = listening_hosts(_descendants(os.getpid()))  # the GCS, the raylet and its workers
        assert hosts and hosts <= {LOOPBACK_V4, LOOPBACK_V6}, hosts
    finally:
        r.shutdown()
    assert os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") is None  # set for the start only


def test_a_start_that_fails_under_load_is_retried_once(monkeypatch):
    calls = []

    def init(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("Failed to start the cluster: some of the raylet failed to startup or the GCS has "
                           "become overloaded.\nmore detail")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    with pytest.raises(RayUnavailable) as err:
        connect(None)
    assert len(calls) == 2 and calls[0]["_node_ip_address"] == distributed.LOOPBACK
    assert "\n" not in str(err.value) and "locally" in str(err.value)
