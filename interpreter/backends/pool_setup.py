"""Give a Docker broker its warm kernel pool (called once by ``server.start``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interpreter.backends.docker_pool import ContainerPool
from interpreter.models import CreateSessionRequest

if TYPE_CHECKING:
    from interpreter.broker import SessionBroker


async def install_pool(broker: SessionBroker) -> ContainerPool:
    """Start a pool of ``settings.pool_size`` kernels with the broker's default options.

    Call it after ``broker.open()``: the startup reconciliation must have dealt with the
    previous process's containers first. The pool lives in ``<data_dir>/pool``, on the
    same filesystem as the sessions' directories (claims rename directories). The broker
    closes it in ``shutdown`` (``broker.pool.close()``), which also uninstalls it.
    """
    settings = broker.settings
    # The template is exactly what a session without limits or env gets, so such sessions
    # match the pool; the session id, owner and paths of the template are not used.
    template = broker.launch_options("pool", "", CreateSessionRequest())
    pool = ContainerPool(
        settings.pool_size,
        template,
        settings.data_dir,
        start_timeout_s=settings.kernel_start_timeout_s,
    )
    await pool.start()
    pool.install()
    broker.pool = pool
    return pool
