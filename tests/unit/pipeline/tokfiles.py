"""Real tokenizer files for the fast-engine tests, built offline from what is installed.

- the bundled 65k byte-level BPE (anthropic 0.34.0 wheel; GPT-2 regex, NFKC)
- a GPT-NeoX-style variant of it: NFC, added tokens with lstrip/rstrip/single_word/normalized flags
- Mistral's tekken ranks (`mistral_common/data/tekken_240911.json`, Apache-2.0; the wheel is installed
  with --no-deps by scripts/test.sh, only its data is read) as Hugging Face tokenizer.json files, the
  way `transformers`' TikTokenConverter makes them: vocab = ranks, each token's merge = the last step of
  tiktoken's own BPE over its bytes. With the tekken regex (tekken-style), Llama 3's (Llama-3-style:
  Split + ByteLevel without regex, no normalizer) and Qwen 2's (with NFC).
- fallback cases: BPE with dropout, a WordPiece and a Unigram tokenizer trained by `tokenizers` itself.
"""

from __future__ import annotations

import base64
import copy
import gzip
import importlib.util
import json
from pathlib import Path
from typing import Any

from storekit.pipeline.bundled import bundled_path
from storekit.pipeline.fastbpe import SPLIT_PATTERNS, bytes_to_unicode

BUNDLED = "bundled:anthropic-bpe-65k.tokenizer.json.gz"
TEKKEN_TOKENS = 24_000  # a prefix of the ranks is itself a whole BPE (merges only use lower ranks)


def bundled_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(bundled_path(BUNDLED).read_bytes()))
    return doc


def neox_style() -> dict[str, Any]:
    doc = bundled_doc()
    doc["normalizer"] = {"type": "NFC"}
    flags = [
        {"content": "<|pad|>", "special": True, "lstrip": True, "rstrip": False},
        {"content": "<|sep|>", "special": True, "lstrip": False, "rstrip": True},
        {"content": "<|tag|>", "special": True, "lstrip": True, "rstrip": True},
        {"content": "word", "special": False, "single_word": True, "normalized": True},
        {"content": "ﬁx", "special": False, "normalized": True},  # matched after NFC (unchanged by NFC)
        {"content": "Ω", "special": False, "normalized": True},  # NFC makes U+2126 this U+03A9
        {"content": "<|end|>", "special": True},
    ]
    next_id = max(doc["model"]["vocab"].values()) + 1
    for k, f in enumerate(flags):
        doc["added_tokens"].append(
            {
                "id": next_id + k,
                "content": f["content"],
                "single_word": f.get("single_word", False),
                "lstrip": f.get("lstrip", False),
                "rstrip": f.get("rstrip", False),
                "normalized": f.get("normalized", False),
                "special": f["special"],
            }
        )
    return doc


def tekken_file() -> Path:
    spec = importlib.util.find_spec("mistral_common")
    assert spec is not None and spec.submodule_search_locations, "scripts/test.sh installs mistral-common"
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "tekken_240911.json"


def _tekken_ranks(limit: int) -> tuple[dict[bytes, int], str, int]:
    data = json.loads(tekken_file().read_text())
    ranks = {base64.b64decode(v["token_bytes"]): int(v["rank"]) for v in data["vocab"][:limit]}
    return ranks, str(data["config"]["pattern"]), int(data["config"]["default_num_special_tokens"])


def _merge_of(token: bytes, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The pair tiktoken's BPE merges last when it encodes `token` with lower-ranked tokens only."""
    limit = ranks[token]
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best):
                best, at = r, i
        assert best is not None, token
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return parts[0], parts[1]


def tekken_style(
    pattern_name: str, normalizer: str | None = None, limit: int = TEKKEN_TOKENS
) -> dict[str, Any]:
    ranks, tekken_pattern, specials = _tekken_ranks(limit)
    assert tekken_pattern == SPLIT_PATTERNS["tekken"]
    chars = bytes_to_unicode()

    def sym(b: bytes) -> str:
        return "".join(chars[x] for x in b)

    merges = []
    for token, _ in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) > 1:
            a, b = _merge_of(token, ranks)
            merges.append([sym(a), sym(b)])
    vocab = {sym(t): r + specials for t, r in ranks.items()}
    added = [
        {
            "id": i,
            "content": c,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, c in enumerate(["<unk>", "<s>", "</s>", "[INST]", "[/INST]"])
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": normalizer} if normalizer else None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": SPLIT_PATTERNS[pattern_name]},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": merges,
        },
    }


def with_dropout() -> dict[str, Any]:
    doc = bundled_doc()
    doc["model"]["dropout"] = 0.1
    return doc


def trained(kind: str, texts: list[str]) -> dict[str, Any]:
    """A WordPiece or Unigram tokenizer trained by `tokenizers` on `texts`."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer()
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer: Any = trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[UNK]", "[SEP]"])
    else:
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=["</s>"], unk_token="</s>")
    tok.train_from_iterator(texts, trainer)
    out: dict[str, Any] = json.loads(tok.to_str())
    return out


def write(doc: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(copy.deepcopy(doc), ensure_ascii=False))
    return path


# -- one small tokenizer per pre-tokenizer family, trained by `tokenizers` (tests/unit/pipeline/
# test_whole_document_truth.py compares shards against them) -----------------------------------
EOS = {
    "bytelevel": "<EOT>",
    "added": "<EOT>",
    "added_cuttable": "<EOT>",
    "metaspace": "</s>",
    "prepend": "</s>",
}
FAMILIES = ("bytelevel", "llama3", "o200k", "tekken", "metaspace", "prepend", "added", "added_cuttable")
# also trained (cut-rule checks only): "qwen2" (Split with Qwen 2's regex, NFC)
_TRAINED: dict[str, str] = {}


def _training_texts() -> list[str]:
    from tests.unit.pipeline.helpers import sample_records

    extra = ["naïve café ﬁ Ω Ω 😀 ①", "x.\n" * 50, "a, b; c!\r\n", "Привет мир", "中文文本"]
    return [r["text"] for r in sample_records(limit_bytes=120_000)] + extra


def _split(pattern_name: str) -> Any:
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERNS[pattern_name]), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def family_eos(family: str) -> str:
    """The EOS token of family_doc(family)."""
    if family in EOS:
        return EOS[family]
    tekken = family in ("tekken", "o200k") and importlib.util.find_spec("mistral_common") is not None
    return "</s>" if tekken else "<|endoftext|>"


def family_doc(family: str) -> dict[str, Any]:
    """A tokenizer.json of `family` (FAMILIES); trained ones are built once per process (~0.2 s)."""
    if family == "bytelevel":
        return bundled_doc()
    if family == "added":
        return neox_style()
    if family == "added_cuttable":  # flags that cannot make a token straddle a whitespace cut
        doc = bundled_doc()
        next_id = max(doc["model"]["vocab"].values()) + 1
        for k, (content, single, normalized, special) in enumerate(
            [("<|x|>", False, False, True), ("word", True, True, False), ("ﬁx", False, True, False)]
        ):
            doc["added_tokens"].append(
                {
                    "id": next_id + k,
                    "content": content,
                    "single_word": single,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": normalized,
                    "special": special,
                }
            )
        return doc
    if family in ("tekken", "o200k") and importlib.util.find_spec("mistral_common") is not None:
        # tekken's ranks (ignore_merges, specials outside the BPE vocabulary: the fast engine compiles
        # them) with the tekken regex, or o200k's regex and NFC
        norm = "NFC" if family == "o200k" else None
        return copy.deepcopy(_cached(f"{family}-file", lambda: tekken_style(family, norm)))
    return copy.deepcopy(_cached(family, lambda: _train(family)))


def _cached(key: str, build: Any) -> dict[str, Any]:
    if key not in _TRAINED:
        _TRAINED[key] = json.dumps(build())
    out: dict[str, Any] = json.loads(_TRAINED[key])
    return out


def _train(family: str) -> dict[str, Any]:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    if family in ("metaspace", "prepend"):
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
        tok.normalizer = None
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=specials, show_progress=False)
    else:
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFKC() if family == "llama3" else normalizers.NFC()
        tok.pre_tokenizer = _split("tekken" if family == "tekken" else family)
        trainer = trainers.BpeTrainer(
            vocab_size=1000,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    tok.train_from_iterator(_training_texts(), trainer)
    doc: dict[str, Any] = json.loads(tok.to_str())
    if family == "o200k":  # (without mistral-common: falls back to tokenizers, specials in the vocab)
        doc["model"]["ignore_merges"] = True
    if family == "prepend":  # Llama 2 / Mistral v1 as `transformers` converts them
        doc["pre_tokenizer"] = None
        doc["normalizer"] = {
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
            ],
        }
    return doc
