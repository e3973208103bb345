"""Free local ports for a server to bind, and whether one is taken."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Collection


def free_ports(count: int, taken: Collection[int] = ()) -> list[int]:
    """``count`` distinct ports free now, none of ``taken``. Each socket stays bound until all are
    picked: one at a time, the OS may hand out the same port twice (Triton then refuses to start
    with HTTP and metrics on one port)."""
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        while len(ports) < count:
            s = held.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            if (port := s.getsockname()[1]) not in taken:
                ports.append(port)
        return ports


def free_port() -> int:
    return free_ports(1)[0]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0
