"""Write a cache folder so that it is either complete or absent: never half-written.

Every cached artefact (a prepared domain, a converted model, a trained EAGLE head) is built in a
temporary sibling folder and renamed into place only once it is complete. An error, or an
interrupt, while building deletes the temporary folder and leaves any previous version alone.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_folder"]


@contextmanager
def atomic_folder(final: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder next to ``final``; on success it replaces ``final``.

    Parameters
    ----------
    final : str or Path
        Where the finished folder must end up. Its parent is created if needed.

    Yields
    ------
    Path
        The temporary folder to write into (same file system as ``final``, so the final
        ``rename`` is atomic).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        tmp.chmod(0o755)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
