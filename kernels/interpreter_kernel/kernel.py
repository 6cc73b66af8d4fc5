"""The IPython kernel class: ipykernel's, except that it never waits for user input."""

from __future__ import annotations

from typing import TextIO

from ipykernel.ipkernel import IPythonKernel
from IPython.core.error import StdinNotImplementedError

#: What ``input()`` and ``getpass()`` raise (as ``StdinNotImplementedError``).
INPUT_NOT_SUPPORTED = (
    "Interactive input is not supported: input() and getpass() cannot read from a user "
    "in this interpreter. Pass data in code (assign it to a variable) or read it from a "
    "file in the working directory instead."
)


class InterpreterKernel(IPythonKernel):
    """ipykernel's IPython kernel whose ``input()`` and ``getpass()`` fail at once.

    Nobody is there to answer an input request: the broker sends ``allow_stdin=False``, and
    even a client that allowed it would leave the cell waiting until its timeout. ipykernel
    already raises in that case; this only makes the error say what to do instead, and makes
    it independent of what the client asked for.
    """

    def raw_input(self, prompt: str = "") -> str:
        """Replace ``input()`` in user code: always raise.

        Raises:
            StdinNotImplementedError: always, with :data:`INPUT_NOT_SUPPORTED`.
        """
        raise StdinNotImplementedError(INPUT_NOT_SUPPORTED)

    def getpass(
        self,
        prompt: str = "",
        stream: TextIO | None = None,
        *,
        echo_char: str | None = None,
    ) -> str:
        """Replace ``getpass.getpass()`` in user code: always raise.

        Raises:
            StdinNotImplementedError: always, with :data:`INPUT_NOT_SUPPORTED`.
        """
        raise StdinNotImplementedError(INPUT_NOT_SUPPORTED)
