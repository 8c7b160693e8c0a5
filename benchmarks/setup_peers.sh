#!/usr/bin/env bash
# Prepare the peers of bench_prepare.py under benchmarks/.work/ (gitignored; nothing here is committed):
#
#   .work/tokenizer/            tokenizer.json from the anthropic==0.34.0 wheel (65k byte-level BPE, <EOT> = id 0)
#                               + tokenizer_config.json / special_tokens_map.json naming <EOT> as eos, so that
#                               transformers (Megatron's HuggingFaceTokenizer) loads the very same tokenizer offline
#   .work/venv-datatrove/       datatrove==$DATATROVE_VERSION from PyPI (+ orjson, the same tokenizers version as storekit)
#   .work/megatron-<tag>/       Megatron-LM source tree at <tag> (git archive of a checkout you fetched)
#   .work/venv-megatron/        torch==$TORCH_VERSION (the local CPU wheel; never a CUDA build), numpy, transformers,
#                               the same tokenizers version, + what tools/preprocess_data.py imports
#
# Usage:
#   bash benchmarks/setup_peers.sh MEGATRON_GIT_DIR [TAG]
#     MEGATRON_GIT_DIR  a git directory (bare or not) of github.com/NVIDIA/Megatron-LM, e.g. the one the
#                       workspace `fetch` tool returns: /work/.mirror/NVIDIA+Megatron-LM/repo
#     TAG               default core_v0.16.1 (matches the newest megatron-core on PyPI when this was written:
#                       `pip index versions megatron-core`)
# Environment: PYTHON (default /root/.pyenv/versions/3.11.7/bin/python, else python3.11),
#              TOKENIZERS_VERSION (default: the version in the storekit dev venv /tmp/venv, else 0.23.3),
#              DATATROVE_VERSION (0.10.1), TORCH_VERSION (2.13.0+cpu), TRANSFORMERS_SPEC ("transformers==5.23.0").
# Idempotent: finished parts are kept (delete the folder to redo one).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="$HERE/.work"
MEGATRON_GIT="${1:-}"
TAG="${2:-core_v0.16.1}"
PYTHON="${PYTHON:-/root/.pyenv/versions/3.11.7/bin/python}"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3.11 || command -v python3)"
DATATROVE_VERSION="${DATATROVE_VERSION:-0.10.1}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0+cpu}"
TRANSFORMERS_SPEC="${TRANSFORMERS_SPEC:-transformers==5.23.0}"
ANTHROPIC_VERSION="0.34.0"
if [ -z "${TOKENIZERS_VERSION:-}" ]; then
  TOKENIZERS_VERSION="$(/tmp/venv/bin/python -c 'import tokenizers; print(tokenizers.__version__)' 2>/dev/null || echo 0.23.3)"
fi
mkdir -p "$WORK"
log() { printf 'setup_peers: %s\n' "$*" >&2; }

# ---------------------------------------------------------------- tokenizer
TOK="$WORK/tokenizer"
if [ ! -s "$TOK/tokenizer.json" ]; then
  log "tokenizer.json from anthropic==$ANTHROPIC_VERSION (wheel only, no install)"
  dl="$(mktemp -d)"
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: -d "$dl" "anthropic==$ANTHROPIC_VERSION"
  mkdir -p "$TOK"
  "$PYTHON" - "$dl" "$TOK" <<'EOF'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/anthropic-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    open(sys.argv[2] + "/tokenizer.json", "wb").write(z.read("anthropic/tokenizer.json"))
EOF
  rm -rf "$dl"
fi
# transformers needs a config to know the eos token; tokenizer_class makes AutoTokenizer use tokenizer.json as is
cat >"$TOK/tokenizer_config.json" <<'EOF'
{
  "tokenizer_class": "PreTrainedTokenizerFast",
  "eos_token": "<EOT>",
  "bos_token": "<SOS>",
  "unk_token": null,
  "pad_token": null,
  "add_bos_token": false,
  "add_eos_token": false,
  "clean_up_tokenization_spaces": false,
  "model_max_length": 1000000000000000019884624838656
}
EOF
cat >"$TOK/special_tokens_map.json" <<'EOF'
{"eos_token": "<EOT>", "bos_token": "<SOS>"}
EOF
sha256sum "$TOK/tokenizer.json" >&2

# ---------------------------------------------------------------- datatrove
DT="$WORK/venv-datatrove"
if [ ! -x "$DT/bin/python" ] || ! "$DT/bin/python" -c "import datatrove" 2>/dev/null; then
  log "venv-datatrove: datatrove==$DATATROVE_VERSION tokenizers==$TOKENIZERS_VERSION"
  "$PYTHON" -m venv "$DT"
  "$DT/bin/pip" install --quiet --upgrade pip
  "$DT/bin/pip" install --quiet "datatrove==$DATATROVE_VERSION" "tokenizers==$TOKENIZERS_VERSION" orjson zstandard
fi
"$DT/bin/python" -c "import datatrove, tokenizers, importlib.metadata as m; print('datatrove', m.version('datatrove'), 'tokenizers', tokenizers.__version__)"

# ---------------------------------------------------------------- Megatron-LM source
MEG_TREE="$WORK/megatron-$TAG"
if [ ! -f "$MEG_TREE/tools/preprocess_data.py" ]; then
  if [ -z "$MEGATRON_GIT" ]; then
    log "no Megatron tree at $MEG_TREE: pass the Megatron-LM git dir as first argument"
    log "  (e.g. fetch github:NVIDIA/Megatron-LM -> /work/.mirror/NVIDIA+Megatron-LM/repo)"
    exit 2
  fi
  log "Megatron-LM $TAG from $MEGATRON_GIT -> $MEG_TREE"
  git --git-dir="$MEGATRON_GIT" rev-parse --verify --quiet "$TAG^{commit}" >/dev/null \
    || { log "tag $TAG not in $MEGATRON_GIT"; exit 2; }
  rm -rf "$MEG_TREE.tmp" && mkdir -p "$MEG_TREE.tmp"
  git --git-dir="$MEGATRON_GIT" archive "$TAG" megatron tools | tar -x -C "$MEG_TREE.tmp"
  git --git-dir="$MEGATRON_GIT" rev-parse "$TAG^{commit}" >"$MEG_TREE.tmp/COMMIT"
  mv "$MEG_TREE.tmp" "$MEG_TREE"
fi
echo "megatron $TAG $(cat "$MEG_TREE/COMMIT")"

# ---------------------------------------------------------------- Megatron venv
MV="$WORK/venv-megatron"
if [ ! -x "$MV/bin/python" ] || ! "$MV/bin/python" -c "import torch, transformers" 2>/dev/null; then
  log "venv-megatron: torch==$TORCH_VERSION (CPU wheel), $TRANSFORMERS_SPEC, tokenizers==$TOKENIZERS_VERSION"
  "$PYTHON" -m venv "$MV"
  "$MV/bin/pip" install --quiet --upgrade pip
  # The +cpu local version only exists as a CPU wheel, so pip cannot pick a CUDA build (no nvidia-* deps).
  "$MV/bin/pip" install --quiet --only-binary=:all: "torch==$TORCH_VERSION"
  "$MV/bin/pip" install --quiet "numpy<3" "$TRANSFORMERS_SPEC" "tokenizers==$TOKENIZERS_VERSION" packaging six "triton==3.9.0"
fi
if "$MV/bin/pip" list 2>/dev/null | grep -qi '^nvidia-'; then
  log "venv-megatron has nvidia-* packages: a CUDA torch slipped in; delete $MV and rerun"; exit 1
fi
# Smoke test: preprocess_data.py must import and load our tokenizer with no hub access.
(
  cd "$MEG_TREE"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$MEG_TREE" "$MV/bin/python" - "$TOK" <<'EOF'
import sys, types, argparse
import torch, transformers, tokenizers
sys.argv = ["preprocess_data.py", "--input", "x", "--output-prefix", "x", "--workers", "1",
            "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", sys.argv[1], "--tokenizer-hf-use-fast"]
sys.path.insert(0, "tools")
import preprocess_data as pd
args = pd.get_args()
tok = pd.build_new_tokenizer(args)
ids = tok.tokenize("Hello storekit world")
print("megatron smoke: torch", torch.__version__, "transformers", transformers.__version__, "tokenizers",
      tokenizers.__version__, "vocab", tok.vocab_size, "eod", tok.eod, "ids", ids)
assert tok.eod == 0, "eod must be <EOT> (id 0)"
EOF
)
log "done"
