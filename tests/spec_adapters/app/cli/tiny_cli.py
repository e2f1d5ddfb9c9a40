"""The tiny world the ``hedgespec`` command tests run on: a tiny local target folder and tiny
prepared domains in its cache, and the options that point a command at them."""

from __future__ import annotations

from pathlib import Path

from tests.spec_adapters.bench_fixtures import make_target_folder, write_domains

DOMS = "code,math,news"


def tiny_world(tmp_path_factory, name: str) -> tuple[Path, Path]:
    """A fresh folder ``name`` holding a tiny target folder and the prepared domains
    :data:`DOMS` under ``cache``, with torch on one thread: ``(root, target folder)``."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp(name)
    folder = make_target_folder(root)
    write_domains(root / "cache", DOMS.split(","))
    return root, folder


def world_args(tiny: tuple[Path, Path], domains: str = DOMS, target: Path | None = None
               ) -> list[str]:
    """``--target`` (the world's, or ``target``), ``--cache-dir``, ``--threads 1`` and
    ``--domains`` of the world ``tiny``."""
    root, folder = tiny
    return ["--target", str(target or folder), "--cache-dir", str(root / "cache"), "--threads", "1",
            "--domains", domains]
