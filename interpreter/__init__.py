"""interp: a stateful code interpreter for AI agents.

The SDK is the public surface of this package::

    from interpreter import Client

    with Client("http://127.0.0.1:8700") as client, client.create_session() as session:
        print(session.run("1 + 1").text)
"""

from interpreter._version import __version__
from interpreter.client import AsyncClient, Client

__all__ = ["AsyncClient", "Client", "__version__"]
