"""Stream text with carriage returns and backspaces applied, as Jupyter front ends show it.

A progress bar (tqdm, pip, a hand-written ``print(..., end="\\r")`` loop) redraws its line by
writing ``\\r`` and the new frame. A terminal, JupyterLab and the classic notebook show only
the last frame: ``\\r`` moves back to the start of the current line, and the characters
written next overwrite the old ones in place (a shorter frame leaves the tail of a longer
one, as on a terminal); ``\\r\\n`` is an ordinary line end; ``\\b`` deletes the character
before it. :class:`OverwrittenText` applies those rules to text that arrives in chunks, so
that a stream kept for a result or a notebook holds what a person would see, not every
frame.

Pure, no I/O: fed by :class:`interpreter.execution.ExecutionRecorder`.
"""

from __future__ import annotations

import re

#: The control characters that rewrite the current line.
_CONTROL = re.compile(r"(\r|\n|\x08)")


class OverwrittenText:
    """Text of one stream output with ``\\r`` and ``\\b`` already applied.

    Completed lines are kept as they are; only the last (open) line can still change. Text
    appended at the end of the line is only collected (a long line arriving in many chunks
    costs linear time); the line is joined when a ``\\r`` or ``\\b`` makes a write land
    inside it.
    """

    __slots__ = ("_cursor", "_done", "_done_chars", "_line", "_line_chars")

    def __init__(self, text: str = "") -> None:
        self._done: list[str] = []
        self._done_chars = 0
        self._line: list[str] = []
        self._line_chars = 0
        self._cursor = 0
        if text:
            self.feed(text)

    def _joined(self) -> str:
        line = "".join(self._line)
        self._line = [line] if line else []
        return line

    def feed(self, text: str) -> None:
        """Apply one more chunk of the stream."""
        if self._cursor == self._line_chars and "\r" not in text and "\x08" not in text:
            self._append(text)
            return
        for piece in _CONTROL.split(text):
            if not piece:
                continue
            if piece == "\n":
                line = self._joined() + "\n"
                self._done.append(line)
                self._done_chars += len(line)
                self._line, self._line_chars, self._cursor = [], 0, 0
            elif piece == "\r":
                self._cursor = 0
            elif piece == "\x08":
                if self._cursor > 0:
                    line = self._joined()
                    self._line = [line[: self._cursor - 1] + line[self._cursor :]]
                    self._line_chars -= 1
                    self._cursor -= 1
            elif self._cursor == self._line_chars:
                self._line.append(piece)
                self._line_chars += len(piece)
                self._cursor = self._line_chars
            else:
                line = self._joined()
                end = self._cursor + len(piece)
                line = line[: self._cursor] + piece + line[end:]
                self._line = [line]
                self._line_chars = len(line)
                self._cursor = end

    def _append(self, text: str) -> None:
        """Text with no ``\\r`` or ``\\b``, written at the end of the open line: its complete
        lines are kept in one piece (most output is this, and a print of many lines would
        otherwise cost a step per line)."""
        end = text.rfind("\n") + 1
        if end:
            done = self._joined() + text[:end]
            self._done.append(done)
            self._done_chars += len(done)
            self._line, self._line_chars = [], 0
        rest = text[end:]
        if rest:
            self._line.append(rest)
            self._line_chars += len(rest)
        self._cursor = self._line_chars

    @property
    def text(self) -> str:
        """What a front end shows."""
        if len(self._done) > 1:
            # Join once and keep the result, so reading after every chunk stays linear.
            self._done = ["".join(self._done)]
        return (self._done[0] if self._done else "") + "".join(self._line)

    def __len__(self) -> int:
        return self._done_chars + self._line_chars

    def keep_last(self, count: int) -> int:
        """Keep only the last ``count`` characters (a finished cell's text cut to its
        tail); the open line and where the next write lands stay as they were, so that
        text printed later still overwrites that line. Returns the characters removed."""
        cut = len(self) - max(count, 0)
        if cut <= 0:
            return 0
        if cut <= self._done_chars:
            done = "".join(self._done)[cut:]
            self._done = [done] if done else []
            self._done_chars = len(done)
            return cut
        into = cut - self._done_chars
        line = self._joined()[into:]
        self._done, self._done_chars = [], 0
        self._line = [line] if line else []
        self._line_chars = len(line)
        self._cursor = max(self._cursor - into, 0)
        return cut

    def replace_done(self, start: int, old: str, new: str) -> bool:
        """Replace ``old``, found at ``start`` among the completed lines, with ``new``
        (completed lines never change otherwise); False when it is not there."""
        end = start + len(old)
        if start < 0 or end > self._done_chars:
            return False
        done = "".join(self._done)
        if done[start:end] != old:
            return False
        done = done[:start] + new + done[end:]
        self._done = [done] if done else []
        self._done_chars = len(done)
        return True

    @property
    def rewound(self) -> bool:
        """A ``\\r`` moved the cursor back to the start of a non-empty open line: the next
        text written overwrites that line."""
        return self._cursor == 0 and self._line_chars > 0


def apply_overwrites(text: str) -> str:
    """``text`` as a Jupyter front end shows it (``\\r`` overwrites, ``\\b`` deletes)."""
    return OverwrittenText(text).text
