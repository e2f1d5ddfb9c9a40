"""llama.cpp's own log lines, kept off the user's terminal unless a call fails.

llama.cpp's C code writes its log to file descriptor 2. ``llama_log_set`` (which
:func:`~spec_adapters.llamacpp.cpu_backend.llama_cpp_module` uses to quiet it) does not reach
the runtime-dispatched CPU backend, a shared library with its own copy of ggml's logger: a
quantization printed a warning per tensor and a load of a Q4_0 file a line per repacked
tensor, some 400 lines in ``make demo``. :func:`captured` points descriptor 2 at a temporary
file for the length of a native call; the caller puts the log's last lines in the error it
raises when the call fails, and the log is dropped when it succeeds.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["CapturedLog", "captured"]


class CapturedLog:
    """What the native code wrote while :func:`captured` held descriptor 2 (read when the
    block ends)."""

    def __init__(self) -> None:
        self.text = ""

    def detail(self, lines: int = 5) -> str:
        """``":\n"`` and the last ``lines`` lines, to end an error message with; empty when
        nothing was written."""
        tail = "\n".join(self.text.strip().splitlines()[-lines:])
        return f":\n{tail}" if tail else ""


@contextlib.contextmanager
def captured() -> Iterator[CapturedLog]:
    """Descriptor 2 goes to a temporary file inside the block, back where it was after it
    (Python's own ``sys.stderr`` is flushed first, so nothing of it lands in the file)."""
    sys.stderr.flush()
    saved = os.dup(2)
    log = CapturedLog()
    with tempfile.TemporaryFile() as file:
        os.dup2(file.fileno(), 2)
        try:
            yield log
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            file.seek(0)
            log.text = file.read().decode(errors="replace")
