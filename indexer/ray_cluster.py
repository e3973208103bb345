"""The Ray executor's cluster: joining one, or starting a local one on loopback, and checking that
every node sees the files."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from pathlib import Path

from search.errors import ServiceError

log = logging.getLogger("indexer.ray")


class RayUnavailable(ServiceError):
    exit_code = 1


def _can_read(paths: list[str], writable: list[str]) -> list[str]:
    """On one node: the paths it cannot read (or write, for ``writable``)."""
    return ([p for p in paths if not os.access(p, os.R_OK)]
            + [p for p in writable if not os.access(p, os.W_OK)])


def connect(address: str | None):
    """The ``ray`` module, connected: "auto" or an address joins a cluster; None starts a local one.
    Returns (ray, whether this call connected, so the caller disconnects)."""
    import ray  # noqa: PLC0415  (optional heavy dependency: only `indexer ingest --ray` loads it)

    if ray.is_initialized():
        return ray, False
    if address and "://" not in address and address != "auto":
        _reachable(address)  # ray.init would retry an address nobody listens on for minutes
    logging.getLogger("ray").setLevel(logging.WARNING)
    for attempt in (1, 2):
        wait_s = gcs_wait_s(attempt)
        try:
            if not address:
                with loopback(), _gcs_wait(wait_s):
                    # "local": a new cluster, never one ray.init finds recorded under /tmp/ray
                    ray.init(address="local", _node_ip_address=LOOPBACK, log_to_driver=False, logging_level=logging.WARNING,
                             include_dashboard=False)
            elif _on_loopback(address):
                with loopback():  # a cluster started on 127.0.0.1: this driver's node IP must be that too
                    ray.init(address=address, _node_ip_address=LOOPBACK, log_to_driver=False, logging_level=logging.WARNING)
            else:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            return ray, True
        except (ConnectionError, RuntimeError, ValueError) as exc:
            if not address and attempt == 1 and _overloaded(exc):
                ray.shutdown()  # a start that timed out under load: once more, from scratch, waiting longer
                log.warning("the local Ray cluster did not start in %d s (%s): trying once more, waiting up to %d s",
                            wait_s, str(exc).splitlines()[0][:120], gcs_wait_s(2))
                continue
            where = f"at {address}" if address else "locally"
            tried = f" (tried twice, waiting up to {wait_s} s; {_load()})" if not address and attempt == 2 else ""
            raise RayUnavailable(f"could not start or join a Ray cluster {where}: {str(exc).splitlines()[0]}{tried}") from None
    raise AssertionError("unreachable")


GCS_WAIT_S = 30  # Ray's own wait for its GCS server's port file on a quiet machine
GCS_WAIT_MAX_S = 600
GCS_WAIT_VAR = "RAY_gcs_server_port_wait_time_s"


def gcs_wait_s(attempt: int, load: float | None = None, cores: int | None = None) -> int:
    """How long a local start waits for Ray's GCS server to write its port file: Ray's 30 s on a
    quiet machine, longer by the load per core (a busy machine starts it slowly: "Timed out waiting
    for file .../gcs_server_port_..." under a load of 10 on 2 cores), doubled for the second try.
    A wait the user set (RAY_gcs_server_port_wait_time_s) is theirs."""
    if (given := os.environ.get(GCS_WAIT_VAR, "")).isdigit():
        return int(given)
    load = os.getloadavg()[0] if load is None else load
    cores = cores or os.cpu_count() or 1
    return int(min(GCS_WAIT_MAX_S, GCS_WAIT_S * max(1.0, load / cores) * attempt))


@contextlib.contextmanager
def _gcs_wait(wait_s: int):
    """Ray's start waits ``wait_s`` for its GCS server; said when that is longer than on a quiet machine."""
    if wait_s > GCS_WAIT_S and not os.environ.get(GCS_WAIT_VAR):
        log.warning("starting a local Ray cluster on a busy machine (%s): waiting up to %d s for it", _load(), wait_s)
    before = os.environ.get(GCS_WAIT_VAR)
    os.environ[GCS_WAIT_VAR] = str(wait_s)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(GCS_WAIT_VAR, None)
        else:
            os.environ[GCS_WAIT_VAR] = before


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count() or 1} cores"


LOOPBACK = "127.0.0.1"


def _on_loopback(address: str) -> bool:
    host = address.split("://", 1)[-1].rpartition(":")[0]
    return host in (LOOPBACK, "localhost")


def _overloaded(exc: BaseException) -> bool:
    """A local start that timed out, as on a busy machine (not a setting that can never work)."""
    return any(s in str(exc) for s in ("failed to startup", "overloaded", "Timed out waiting for file"))


@contextlib.contextmanager
def loopback():
    """A local cluster started inside binds its servers to 127.0.0.1 (its node IP), not to the
    machine's network address: nothing outside this machine can reach it. Ray resolves a node IP of
    127.0.0.1 to the network address unless it runs single-machine (the mode it uses on macOS and
    Windows), which this switches on for the start only: a later join of a remote cluster needs the
    real address. The environment variable reaches the processes the start spawns."""
    from ray._private import ray_constants  # noqa: PLC0415  (optional: ray)

    var, before = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR)
    enabled = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[var], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = enabled
        if before is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = before


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise RayUnavailable(f"could not join the Ray cluster at {address}: {exc} (is `ray start --head` running there?)") from None


def check_nodes(ray, roots: list[Path], writable: list[Path]) -> None:
    """Refuse to start when a node cannot see the files (they must be on a filesystem every node mounts)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415  (optional: ray)

    probe = ray.remote(num_cpus=0)(_can_read)
    paths = [str(r) for r in roots if r.exists()]
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = [(n, probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
             .remote(paths, [str(w) for w in writable])) for n in nodes]
    for node, ref in refs:
        try:
            missing = ray.get(ref, timeout=60)
        except (ray.exceptions.TaskUnschedulableError, ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError):
            # The node left after ray.nodes() still listed it (a node killed moments ago is "Alive"
            # until the cluster notices): it gets no work either, so there is nothing to check.
            continue
        if missing:
            raise RayUnavailable(f"Ray node {node.get('NodeManagerAddress', '?')} cannot access {missing[0]}: every node "
                                 "must see the files and the data dir at the same path (a shared filesystem)")
