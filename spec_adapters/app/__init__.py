"""The application over the library: domain data, drafter pool, benchmarks, command line.

::

    cli/        the ``hedgespec`` command: the parser (cli.main), one module per group of
                commands (build, generate, bench, vllm) and what they share (cli.common)
    bench/      the benchmarks: the transformers one (bench.run) with its presets
                (bench.config), per-prompt measuring (bench.measure), fixed-drafter replay
                (bench.replay), tables, plots and aggregation; the one inside vLLM (bench.vllm)
                and its engine-side worker (bench.vllm_worker)
    pool/       the drafter pool: its settings (pool.config), its entries on disk
                (pool.entries), what each entry is built from (pool.builders), building and
                loading it in its cache folder (pool.cache)
    distill/    the target's own answers to training prompts (distill.answers) and the vLLM
                worker that makes them (distill.vllm_worker)
    corpora/    where each domain's text comes from
    domains.py  the domains: names, preparing, caching and loading their data
    router.py   the domain router (MiniLM embeddings + a linear classifier)
    serve.py    vLLM's OpenAI server with the HedgeSpec proposer
    args.py     argparse types shared by the command lines
    log.py      progress messages on stderr

Nothing in the library (``core``, ``drafters``, ``decoding``, ``selection``, ``eagle``,
``hf``, ``store``, ``vllm``) imports this package.
"""
