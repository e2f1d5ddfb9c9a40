"""``hedgespec distill``: the target's own answers to every domain's training-side prompts.

A drafter predicts the *target's* text, so the best material to build a specialist from is the
target's own output in that domain (self-distillation, as EAGLE heads are trained on the
target's features). For each domain this asks the target the domain's training-side prompts
(``Domain.train_prompts``, disjoint from the benchmark prompts by source unit), in order and in
batches, until ``tokens_per_domain`` answer tokens: chat template, greedy, stopped at EOS or
``max_new_tokens``, left-padded batches (:func:`answer_batch`).

Layout (``<out>/<target-id>/``, the target id of
:func:`spec_adapters.store.target_pool.target_id`)::

    manifest.json            target fingerprint, settings, per domain: answers, tokens,
                             the file's SHA-256; the command and the time it took
    answers-<domain>.npz     compressed: ids (uint32, concatenated), offsets, the prompts

and, beside it while a run is in progress, ``<out>/.<target-id>.partial/<domain>/batch-<i>.npz``
(the finished batches).

Resumable: every finished batch is written atomically; a run that is killed and started again
skips the batches it has and produces the same files, byte for byte (the batches are fixed by
the prompt order and ``batch_size``; greedy decoding of a batch is deterministic on one
machine and thread count). The answers belong to one target: :func:`weights_fingerprint`
hashes its weights and vocabulary, and :func:`load_answers` refuses a set made by another
target, naming both (the pool then says so instead of silently using foreign answers).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from spec_adapters.app.args import check_int
from spec_adapters.store.atomic import atomic_folder
from spec_adapters.store.integrity import CacheError, file_digests, verify_files

__all__ = ["ENGINES", "FORMAT", "DistillConfig", "answer_batch", "answer_roots", "answers_folder",
           "distill", "find_answers",
           "load_answers", "read_token_lists", "run_batches", "save_token_lists", "shipped_dir",
           "weights_fingerprint"]

FORMAT = 1
_COMMAND = "hedgespec distill --engine vllm --threads 2 --out data/distilled"


@dataclass(frozen=True)
class DistillConfig:
    """How many answers, how long, how batched.

    Attributes
    ----------
    tokens_per_domain : int
        Stop a domain after the first batch that brings its answer tokens to this many (or
        when its training-side prompts run out).
    max_new_tokens : int
        Longest answer (EOS stops one earlier).
    batch_size : int
        Prompts generated together (see docs/data.md for the measured throughputs: vLLM 232 / 258
        tok/s at 32 / 64 sequences).
    """

    tokens_per_domain: int = 50_000
    max_new_tokens: int = 256
    batch_size: int = 64

    def __post_init__(self) -> None:
        for name in ("tokens_per_domain", "max_new_tokens", "batch_size"):
            check_int(name, getattr(self, name), 1)


def weights_fingerprint(model, tokenizer) -> str:
    """SHA-256 (16 hex) of the target's parameters (names, shapes, dtypes, bytes) and its
    vocabulary: two targets share it only if they compute the same function on the same
    tokens."""
    import torch

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes())
    h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    return h.hexdigest()[:16]


def answer_batch(model, tokenizer, prompts: Sequence[str], max_new_tokens: int) -> list[list[int]]:
    """The target's greedy answers to ``prompts`` (chat template), generated together, each
    cut before its first EOS or at ``max_new_tokens``.

    One left-padded prefill (positions from the attention mask, logits of the last position
    only), then one token per row per step from the KV cache; a row that has finished leaves
    the batch at once (``DynamicCache.batch_select_indices``), so a step costs what the rows
    still answering cost. ``model.generate`` computes every row until the longest answer ends:
    on the code prompts here 60% of its row-steps were past an EOS.
    """
    import torch

    from spec_adapters.app.domains import chat_ids
    from spec_adapters.hf.target import cache_kwarg, new_cache

    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos]) - {None}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos), 0)
    ids = [chat_ids(tokenizer, p) for p in prompts]
    L = max(len(x) for x in ids)
    inp = torch.full((len(ids), L), pad, dtype=torch.long)
    mask = torch.zeros((len(ids), L), dtype=torch.long)
    for i, x in enumerate(ids):
        inp[i, L - len(x):], mask[i, L - len(x):] = x, 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = new_cache(model)
    kv = {cache_kwarg(model): cache}
    answers: list[list[int]] = [[] for _ in ids]
    rows = torch.arange(len(ids))
    with torch.inference_mode():
        logits = model(input_ids=inp, attention_mask=mask, position_ids=pos, use_cache=True,
                       logits_to_keep=1, **kv).logits
        last = pos[:, -1]
        while True:
            nxt = logits[:, -1].argmax(-1)
            keep = []
            for j, (r, t) in enumerate(zip(rows.tolist(), nxt.tolist(), strict=True)):
                if t not in eos:
                    answers[r].append(t)
                    if len(answers[r]) < max_new_tokens:
                        keep.append(j)
            if not keep:
                return answers
            if len(keep) < len(rows):
                idx = torch.tensor(keep)
                cache.batch_select_indices(idx)
                rows, mask, nxt, last = rows[idx], mask[idx], nxt[idx], last[idx]
            mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)
            last = last + 1
            logits = model(input_ids=nxt[:, None], attention_mask=mask,
                           position_ids=last[:, None], use_cache=True, **kv).logits


def answers_folder(out_dir: str | os.PathLike, model, tokenizer) -> Path:
    """``<out_dir>/<target-id>``: one folder per target (by shape; the fingerprint inside
    tells targets of one shape apart)."""
    from spec_adapters.store.target_pool import loaded_target_id

    return Path(out_dir) / loaded_target_id(model, tokenizer)


def find_answers(roots: Sequence[str | os.PathLike], model, tokenizer) -> Path:
    """The first of ``<root>/<target-id>`` holding an answer set (the last one when none does,
    so that the error names where the shipped set would be)."""
    folders = [answers_folder(r, model, tokenizer) for r in roots]
    return next((f for f in folders if (f / "manifest.json").is_file()), folders[-1])


def answer_roots(answers_dir: str | os.PathLike | None, cache_dir: str | os.PathLike
                 ) -> list[Path]:
    """Where a target's answer set is looked for, in order: ``answers_dir`` alone when given,
    else ``<cache_dir>/distilled`` then the repository's :func:`shipped_dir`; the first is
    where a missing set is made."""
    return [Path(answers_dir)] if answers_dir else [Path(cache_dir) / "distilled", shipped_dir()]


def shipped_dir() -> Path:
    """The repository's committed answer sets (``data/distilled``)."""
    return Path(__file__).resolve().parents[3] / "data" / "distilled"


def save_token_lists(path: Path, answers: list[list[int]], prompts: list[str]) -> None:
    """Write answers (token lists) and their prompts as one compressed ``.npz`` (concatenated
    uint32 ids, offsets, the prompts as JSON), atomically: the format of the answer sets and
    of the pool's answers entries."""
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, ids=np.array([t for a in answers for t in a], dtype=np.uint32),
                        offsets=np.cumsum([0, *map(len, answers)]).astype(np.int64),
                        prompts=np.array(json.dumps(prompts)))
    os.replace(tmp, path)


def read_token_lists(path: Path) -> tuple[list[list[int]], list[str]]:
    """``(answers, prompts)`` of a file :func:`save_token_lists` wrote (``CacheError`` when it
    is not one)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            ids, off = z["ids"].astype(np.int64), z["offsets"]
            prompts = json.loads(str(z["prompts"]))
    except (OSError, KeyError, ValueError) as err:
        raise CacheError(f"{path} is not an answers file: {err}") from None
    return [ids[a:b].tolist() for a, b in itertools.pairwise(off)], prompts


ENGINES = ("vllm", "transformers")


def distill(model, tokenizer, domains: dict, out_dir: str | os.PathLike,
            config: DistillConfig | None = None, *, engine: str = "transformers",
            progress: bool = True, on_batch: Callable[[str, int], None] | None = None) -> dict:
    """Generate (or finish) the answer set of ``model`` for ``domains``; return its manifest.

    Parameters
    ----------
    model, tokenizer
        The target.
    domains : dict of name -> Domain
        Their ``train_prompts`` are asked, in order.
    out_dir : path-like
        The set goes to :func:`answers_folder` ``(out_dir, model, tokenizer)``.
    config : DistillConfig
    engine : {"transformers", "vllm"}
        Who generates: :func:`answer_batch` in this process, or vLLM (continuous batching,
        ``max_num_seqs = batch_size``) on the same model folder in a subprocess of the vLLM
        environment (:mod:`spec_adapters.app.distill.vllm_worker`; 232 against 52 tok/s here on the
        code prompts at 32 sequences).
    progress : bool
        A tqdm bar over the answer tokens, with tokens/s.
    on_batch : callable, optional
        ``on_batch(domain, i)`` after batch ``i`` of ``domain`` is saved (tests interrupt a run
        here; transformers engine only).

    Returns
    -------
    dict
        The manifest (also ``manifest.json``): ``target`` (id, fingerprint), ``settings``,
        ``engine``, per domain ``answers``, ``tokens``, ``file``, ``size``, ``sha256``;
        ``seconds`` spent generating (this run and the interrupted ones before it) and
        ``tokens_per_s``.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    cfg = config or DistillConfig()
    empty = [n for n, d in domains.items() if not d.train_prompts]
    if empty:
        raise ValueError(f"domain(s) {empty} have no training-side prompts to distill")
    folder = answers_folder(out_dir, model, tokenizer)
    work = folder.parent / f".{folder.name}.partial"
    settings = {**asdict(cfg), "engine": engine, "domains": sorted(domains),
                "fingerprint": weights_fingerprint(model, tokenizer)}
    state = work / "settings.json"
    if work.exists() and (not state.is_file() or json.loads(state.read_text()) != settings):
        shutil.rmtree(work)  # a run with other settings: its batches are not ours
    work.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps(settings))
    prompts = {n: list(d.train_prompts) for n, d in domains.items()}
    if engine == "vllm":
        _distill_in_vllm(str(model.config.name_or_path), prompts, work, cfg)
    else:
        run_batches(prompts, work, cfg,
                    lambda batch: answer_batch(model, tokenizer, batch, cfg.max_new_tokens),
                    progress=progress, on_batch=on_batch)
    spent = json.loads((work / "seconds.json").read_text())["seconds"]
    return _finish(folder, work, list(domains), cfg, settings, spent)


def run_batches(prompts: dict[str, list[str]], work: Path, cfg: DistillConfig,
                answer: Callable[[list[str]], list[list[int]]], *, progress: bool = True,
                on_batch: Callable[[str, int], None] | None = None) -> None:
    """For each domain, the batches of its prompts in order until ``cfg.tokens_per_domain``
    answer tokens: a batch already in ``work/<domain>/`` is counted, a missing one is answered
    (``answer(prompts) -> token lists``) and saved atomically; the generation time adds up in
    ``work/seconds.json``. Both engines run this loop."""
    from tqdm.auto import tqdm

    clock = work / "seconds.json"
    spent = json.loads(clock.read_text())["seconds"] if clock.is_file() else 0.0
    bar = tqdm(total=cfg.tokens_per_domain * len(prompts), unit="tok", desc="distill",
               disable=not progress, smoothing=0.1)
    for name, asks in prompts.items():
        ddir = work / name
        ddir.mkdir(exist_ok=True)
        total = 0
        for i, a in enumerate(range(0, len(asks), cfg.batch_size)):
            if total >= cfg.tokens_per_domain:
                break
            f = ddir / f"batch-{i:05d}.npz"
            if f.is_file():
                answers = read_token_lists(f)[0]
            else:
                t0 = time.perf_counter()
                batch = asks[a:a + cfg.batch_size]
                answers = answer(batch)
                save_token_lists(f, answers, batch)
                spent += time.perf_counter() - t0
                clock.write_text(json.dumps({"seconds": spent}))
                if on_batch is not None:
                    on_batch(name, i)
            n = sum(map(len, answers))
            bar.update(min(n, max(0, cfg.tokens_per_domain - total)))
            total += n
            bar.set_postfix_str(f"{name} {total} tok")
    if not clock.is_file():
        clock.write_text(json.dumps({"seconds": spent}))
    bar.close()


def _distill_in_vllm(model_folder: str, prompts: dict[str, list[str]], work: Path,
                     cfg: DistillConfig) -> None:
    """:func:`run_batches` with vLLM, in the vLLM environment's interpreter."""
    import subprocess

    from spec_adapters.app.serve import find_vllm_python, server_env

    python = find_vllm_python()
    job = work / "job.json"
    job.write_text(json.dumps({"model": model_folder, "prompts": prompts, "config": asdict(cfg)}))
    env = server_env(python, work / "no-proposer.json", {"VLLM_CPU_KVCACHE_SPACE": "4",
                                                         **os.environ})
    # (the KV cache: 64 answers of ~800 tokens take ~2.4 GiB)
    rc = subprocess.run([str(python), "-m", "spec_adapters.app.distill.vllm_worker", str(job)],
                        env=env, check=False).returncode
    if rc != 0:
        raise RuntimeError(f"the vLLM distillation worker failed (exit status {rc}); the "
                           f"batches it finished are kept in {work} and a new run resumes "
                           "from them")


def _finish(folder: Path, work: Path, domains: list[str], cfg: DistillConfig, settings: dict,
            spent: float) -> dict:
    """Join each domain's batches into ``answers-<domain>.npz`` and write the manifest; the
    set replaces ``folder`` atomically and the partial batches go."""
    per: dict[str, dict] = {}
    with atomic_folder(folder) as tmp:
        for name in domains:
            answers, prompts, total = [], [], 0
            for f in sorted((work / name).glob("batch-*.npz")):
                if total >= cfg.tokens_per_domain:
                    break
                a, p = read_token_lists(f)
                answers += a
                prompts += p
                total += sum(map(len, a))
            file = f"answers-{name}.npz"
            save_token_lists(tmp / file, answers, prompts)
            per[name] = {"answers": len(answers), "tokens": total, "file": file}
        digests = file_digests(tmp, [p["file"] for p in per.values()])
        for p in per.values():
            p |= digests[p["file"]]  # size, sha256
        n = sum(p["tokens"] for p in per.values())
        manifest = {"format": FORMAT, "target": {"id": folder.name,
                                                 "fingerprint": settings["fingerprint"]},
                    "settings": asdict(cfg), "engine": settings["engine"], "domains": per,
                    "seconds": round(spent, 1),
                    "tokens_per_s": round(n / spent, 1) if spent else None,
                    "command": _COMMAND}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return manifest


def load_answers(folder: str | os.PathLike, domain: str, fingerprint: str,
                 tokens_per_domain: int) -> tuple[list[list[int]], list[str]]:
    """``(answers, prompts)`` of ``domain`` in the answer set at ``folder``, checked.

    Raises
    ------
    CacheError
        No set there, a set made by another target (``fingerprint`` differs from the
        manifest's), with other settings (``tokens_per_domain``), without ``domain``, or a file
        that fails its checksum: each message names the problem and ``hedgespec distill``.
    """
    folder = Path(folder)
    fix = ("run `hedgespec distill` for this target (45-55 min on 2 cores for a 135M-270M "
           "model)")
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        raise CacheError(f"no distilled answers in {folder}; {fix}") from None
    theirs = manifest.get("target", {}).get("fingerprint")
    if theirs != fingerprint:
        raise CacheError(f"the distilled answers in {folder} were made by another target "
                         f"(fingerprint {theirs}, this target's is {fingerprint}); they are "
                         f"not used for it: {fix}")
    have = manifest.get("settings", {}).get("tokens_per_domain")
    if have != tokens_per_domain:
        raise CacheError(f"the distilled answers in {folder} hold {have} tokens per domain, "
                         f"the pool asks for {tokens_per_domain}; {fix} with "
                         f"--tokens-per-domain {tokens_per_domain}")
    entry = manifest.get("domains", {}).get(domain)
    if not isinstance(entry, dict):
        raise CacheError(f"the distilled answers in {folder} have no domain {domain!r}; {fix}")
    verify_files(folder, {entry["file"]: {"size": entry["size"], "sha256": entry["sha256"]}})
    return read_token_lists(folder / entry["file"])
