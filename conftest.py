"""Kernels that nbval starts talk to pytest over Unix sockets, not TCP.

jupyter_client picks a kernel's TCP ports by binding port 0 and letting go; with several pytest workers
starting kernels at once, another kernel can take such a port before its own kernel binds it ("Address
already in use", the kernel dies). A Unix socket's name cannot be taken that way. Windows has no Unix
sockets for ZeroMQ, so there the default stays. The sockets' names are absolute: the kernel runs in the
notebook's folder, pytest elsewhere.
"""

import os
import tempfile
import uuid


def unix_socket_prefix() -> str:
    """A fresh absolute prefix for a kernel's sockets (jupyter_client appends -1 ... -5)."""
    return os.path.join(tempfile.gettempdir(), f"kernel-{uuid.uuid4().hex[:12]}")


if os.name != "nt":
    import nbval.kernel
    from jupyter_client.manager import KernelManager

    class UnixSocketKernelManager(KernelManager):
        def __init__(self, **kwargs):
            kwargs.setdefault("ip", unix_socket_prefix())
            super().__init__(transport="ipc", **kwargs)

    nbval.kernel.KernelManager = UnixSocketKernelManager
