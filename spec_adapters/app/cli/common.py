"""What the ``hedgespec`` commands share: :class:`UserError` (one line on stderr, exit status
2) and setting up what a command runs on from its parsed arguments: torch threads, the target
(installing the default target's wheel when asked), the domain data, the pool configuration and
the router's package."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from spec_adapters.app.log import log as _log

__all__ = ["UserError", "pool_config", "prepared_domains",
           "require_router_package", "setup_threads", "target_from_args"]

class UserError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


def _one_line(err: BaseException, limit: int = 400) -> str:
    """``Type: message`` on one line, at most ``limit`` characters of message (library
    messages can span many lines)."""
    kind = type(err).__qualname__
    if type(err).__module__ not in ("builtins", "__main__"):
        kind = f"{type(err).__module__}.{kind}"
    text = " ".join(str(err).split()) or "no message"
    return f"{kind}: {text if len(text) <= limit else text[:limit - 3] + '...'}"


def setup_threads(n: int | None) -> None:
    """Use ``n`` torch CPU threads (default: ``min(2, cores)``)."""
    import torch

    torch.set_num_threads(n or min(2, os.cpu_count() or 1))


def _install_wheel(spec: str) -> None:
    """``pip install --no-deps <spec>`` into this interpreter (the packages are data wheels)."""
    _log(f"pip install --no-deps {spec}")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", spec],
                       capture_output=True, text=True, check=False)
    if r.returncode:
        raise UserError(f"pip install --no-deps {spec} failed: {r.stderr.strip()[-400:]}")
    import importlib

    importlib.invalidate_caches()


def target_from_args(args: argparse.Namespace, install: bool = False):
    """Load the target and tokenizer named by ``args.target`` (``args.dtype`` and
    ``args.device`` when the command has them).

    Parameters
    ----------
    args : argparse.Namespace
        The parsed command line (``target``, ``cache_dir``, optionally ``dtype``, ``device``).
    install : bool
        Install the default target's wheel when it is missing (else that is a UserError).

    Returns
    -------
    (model, tokenizer)

    Raises
    ------
    UserError
        The target is missing or does not load (one line naming the path and the error).
    """
    from spec_adapters.hf.models import DEFAULT_GGUF_WHEEL, find_default_gguf, load_target

    if args.target is None:
        try:
            find_default_gguf()
        except FileNotFoundError as err:
            if not install:
                raise UserError(str(err)) from None
            _install_wheel(DEFAULT_GGUF_WHEEL)
    dtype, device = getattr(args, "dtype", None), getattr(args, "device", None)
    t = time.perf_counter()
    try:
        if dtype is not None:
            import torch

            dtype = getattr(torch, dtype)
        model, tok = load_target(args.target, args.cache_dir, dtype=dtype)
        if device is not None:
            model = model.to(device)
    except FileNotFoundError as err:
        raise UserError(str(err)) from None
    except Exception as err:  # transformers / gguf raise anything on a bad file: name the path
        raise UserError(f"cannot load the target {args.target or 'default'}: "
                        f"{_one_line(err)}") from None
    _log(f"target {model.config.name_or_path or args.target} loaded in "
         f"{time.perf_counter() - t:.1f} s")
    return model, tok


def pool_config(args: argparse.Namespace, **extra):
    """The :class:`spec_adapters.app.pool.cache.PoolConfig` of ``args.domains`` and the pool options
    given on the command line (the others keep their defaults), updated by ``extra``."""
    from spec_adapters.app.pool.cache import PoolConfig

    kw = {"domains": args.domains}
    for name in ("max_train_tokens", "eagle_steps", "extra_shards", "ngram_order",
                 "distilled_tokens"):
        v = getattr(args, name, None)
        if v is not None:
            kw[name] = v
    kw.update(extra)
    return PoolConfig(**kw)


def prepared_domains(args: argparse.Namespace) -> dict:
    """Prepare ``args.domains`` under ``args.cache_dir`` if needed, then load them.

    Raises
    ------
    UserError
        Preparing the data failed (a fetch or a build).
    """
    from spec_adapters.app.domains import load_domains, prepare_domains

    try:
        prepare_domains(args.cache_dir, args.domains)
    except RuntimeError as err:
        raise UserError(f"preparing the domain data failed: {err}") from None
    return load_domains(args.cache_dir, args.domains)


def require_router_package() -> None:
    """Raise :class:`UserError` (saying what to install) when the router's MiniLM wheel is
    missing."""
    from spec_adapters.app.router import find_minilm

    try:
        find_minilm()
    except FileNotFoundError as err:
        raise UserError(str(err)) from None
