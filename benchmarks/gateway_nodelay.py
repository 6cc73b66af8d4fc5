"""Loaded by the Kernel Gateway process for the benchmark's ``TCP_NODELAY`` variant.

jupyter_server does not set ``TCP_NODELAY`` on kernel websockets, so each message written
right after another waits for the client's delayed ACK (about 40 ms on Linux): a ``1+1``
round trip pays that once or twice. This connection class (the gateway's documented
``KernelGatewayApp.kernel_websocket_connection_class`` option) sets it, to show the
gateway's latency without that effect. Imports jupyter_server: only the gateway loads it.
"""

from __future__ import annotations

import asyncio

from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection


class NoDelayChannels(ZMQChannelsWebsocketConnection):
    def connect(self) -> asyncio.Future[None] | None:
        self.websocket_handler.set_nodelay(True)
        return super().connect()
