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
	touch $(STAMP)

demo: $(STAMP)
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
