"""Finding, fingerprinting and loading the tokenizer (Hugging Face `tokenizers`, offline only).

A tokenizer is a `tokenizer.json` (optionally `.gz`), a local Hugging Face tokenizer folder, a hub
name that is already in the local Hugging Face cache, or `bundled:NAME`. Nothing is ever downloaded.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import xxhash

from storekit.errors import ConfigError, InputError, MismatchError, NotFoundError, refuse_not_regular
from storekit.pipeline.bundled import bundled_path, is_bundled

# Megatron's own rule (DType.optimal_dtype): uint16 below 65500 token ids, else int32
UINT16_VOCAB_LIMIT = 65500
EOS_CANDIDATES = (
    "<|endoftext|>",
    "</s>",
    "<|end_of_text|>",
    "<EOT>",
    "<eos>",
    "<|eot_id|>",
    "<|im_end|>",
    "[SEP]",
)
BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>", "<SOS>", "[CLS]", "<|endoftext|>")
_HUB_NAME_RE = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# tokenizer.json settings that would rewrite every document (cut it at max_length, pad it): off on load
SWITCHED_OFF = ("truncation", "padding")
_SPLIT_SAFE_NORMALIZERS = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents"}


@dataclass(frozen=True, kw_only=True)
class TokenizerInfo:
    name: str  # what the user gave (path, folder, hub name or bundled:NAME)
    file: str  # the tokenizer.json (or .json.gz) actually loaded
    xxh3_128: str  # of the uncompressed tokenizer.json bytes
    vocab_size: int  # including added tokens
    eos_id: int | None
    bos_id: int | None
    eos_token: str | None
    bos_token: str | None
    dtype: str  # uint16 | int32 (Megatron's choice for this vocabulary)
    splittable: bool  # cut_rule is not None (kept for plans written before cut_rule)
    engine: str = "hf"  # hf (`tokenizers`) | tiktoken (compiled fast BPE): see storekit.pipeline.engines
    engine_reason: str = ""
    sample_check: dict[str, Any] | None = None  # both engines on a sample of the input (engines.sample_check)
    # where long documents may be cut (cuts.CUT_RULES) with the ids of the whole text; None: never cut
    cut_rule: str | None = None
    # settings of tokenizer.json that storekit switches off on load (truncation, padding)
    switched_off: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> TokenizerInfo:
        return cls(**{**doc, "switched_off": tuple(doc.get("switched_off") or ())})

    def manifest_entry(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "vocab_size": self.vocab_size,
            "xxh3_128": self.xxh3_128,
            "eos": {"token": self.eos_token, "id": self.eos_id},
            "bos": {"token": self.bos_token, "id": self.bos_id},
            "dtype": self.dtype,
            # storekit encodes every document whole: tokenizer.json's truncation/padding never apply
            "switched_off": list(self.switched_off),
            "cut_rule": self.cut_rule,
            "engine": {"name": self.engine, "reason": self.engine_reason, "sample_check": self.sample_check},
        }


def hub_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def _from_hub_cache(name: str) -> Path | None:
    repo = hub_cache_dir() / ("models--" + name.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        candidate = snapshots / ref.read_text().strip()
        if candidate.is_dir():
            return candidate
    found = sorted(p for p in snapshots.iterdir() if (p / "tokenizer.json").is_file())
    return found[-1] if len(found) == 1 else None


def locate(ref: str) -> tuple[Path, Path | None]:
    """(tokenizer.json file, folder with tokenizer_config.json or None)."""
    if is_bundled(ref):
        return bundled_path(ref), None
    path = Path(os.path.expanduser(ref))
    if not path.is_dir():
        refuse_not_regular(str(path))  # a FIFO or a device: never read (would block or never end)
    if path.is_file():
        return path, path.parent if (path.parent / "tokenizer_config.json").is_file() else None
    if path.is_dir():
        if not (path / "tokenizer.json").is_file():
            raise InputError(
                f"tokenizer folder {ref} has no tokenizer.json",
                hint="only fast tokenizers (tokenizer.json) are supported: save one with save_pretrained()",
            )
        return path / "tokenizer.json", path
    if _HUB_NAME_RE.match(ref) and not ref.endswith((".json", ".gz")):
        folder = _from_hub_cache(ref)
        if folder is not None and (folder / "tokenizer.json").is_file():
            return folder / "tokenizer.json", folder
        raise NotFoundError(
            f"tokenizer {ref!r} is not a local file or folder and is not in the Hugging Face cache "
            f"({hub_cache_dir()}); storekit works offline and never downloads",
            hint=f"on a machine with internet: `hf download {ref} tokenizer.json tokenizer_config.json`, "
            "then copy the cache, or pass --tokenizer PATH/tokenizer.json",
        )
    raise NotFoundError(
        f"tokenizer {ref!r} does not exist", hint="pass a tokenizer.json or a tokenizer folder"
    )


def read_tokenizer_json(file: str | Path) -> str:
    data = Path(file).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8")


def read_planned(info: TokenizerInfo) -> str:
    """The tokenizer.json text, provably the bytes `info` was made from: with the fast engine it is
    loaded only when a document needs it, possibly long after planning."""
    text = read_tokenizer_json(info.file)
    if xxhash.xxh3_128_hexdigest(text.encode("utf-8")) != info.xxh3_128:
        raise MismatchError(
            f"tokenizer {info.file} changed since it was planned (xxh3-128 differs)",
            hint="rerun the command to plan again with the current tokenizer",
        )
    return text


# Loading takes ~0.1-0.25 s; forked workers inherit the parent's instance (it never ran a thread pool).
_LOADED: dict[str, Any] = {}


def load_tokenizer(info: TokenizerInfo, *, special_as_text: bool = False) -> Any:
    """The `tokenizers` instance (one per process); `special_as_text`: literal special-token strings in a
    document are encoded as plain text instead of becoming the special token."""
    key = info.xxh3_128 + (":special-as-text" if special_as_text else "")
    if key not in _LOADED:
        tokenizer = _LOADED.get(info.xxh3_128)
        if tokenizer is None:
            tokenizer = _from_text(info.file, read_planned(info))
            _confirm(info, tokenizer)
            _LOADED[info.xxh3_128] = tokenizer
        if special_as_text:
            tokenizer = _from_text(info.file, tokenizer.to_str())
            tokenizer.encode_special_tokens = True
        _LOADED[key] = tokenizer
    return _LOADED[key]


def resolve_tokenizer(
    ref: str, *, eos: bool, bos: bool, eos_token: str | None = None, bos_token: str | None = None
) -> TokenizerInfo:
    """What a plan needs to know of the tokenizer. Read from tokenizer.json itself (~30 ms) when its
    model is one whose vocabulary is plain JSON: loading it into `tokenizers` takes ~0.1-0.25 s, and
    a Slurm submission would otherwise wait for that before its sbatch. `load_tokenizer` checks these
    facts against the library the first time it loads the tokenizer."""
    file, folder = locate(ref)
    try:
        text = read_tokenizer_json(file)
        doc = json.loads(text)
        vocab: _Vocab = _JsonVocab.of(doc) or _LibraryVocab(_from_text(file, text))
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError, KeyError, IndexError) as exc:
        raise InputError(f"tokenizer {file}: cannot be loaded ({type(exc).__name__}: {exc})") from None
    config = _tokenizer_config(folder)
    eos_tok, eos_id = _special(vocab, "eos", eos, eos_token, config, EOS_CANDIDATES)
    bos_tok, bos_id = _special(vocab, "bos", bos, bos_token, config, BOS_CANDIDATES)
    size = vocab.size()
    digest = xxhash.xxh3_128_hexdigest(text.encode("utf-8"))
    rule = cut_rule(doc)
    if isinstance(vocab, _LibraryVocab):
        _LOADED[digest] = vocab.tokenizer
    return TokenizerInfo(
        name=ref,
        file=str(Path(file).resolve()),
        xxh3_128=digest,
        vocab_size=size,
        eos_id=eos_id,
        bos_id=bos_id,
        eos_token=eos_tok,
        bos_token=bos_tok,
        dtype="uint16" if size < UINT16_VOCAB_LIMIT else "int32",
        splittable=rule is not None,
        cut_rule=rule,
        switched_off=tuple(k for k in SWITCHED_OFF if doc.get(k)),
    )


class _Vocab:
    def token_to_id(self, token: str) -> int | None:
        raise NotImplementedError

    def size(self) -> int:
        raise NotImplementedError


class _JsonVocab(_Vocab):
    """The vocabulary as `tokenizers` builds it from tokenizer.json: added tokens take precedence over
    the model's own, and the size counts distinct token strings of both (get_vocab_size(True))."""

    def __init__(self, model: dict[str, int], added: dict[str, int]) -> None:
        self.model, self.added = model, added

    @classmethod
    def of(cls, doc: dict[str, Any]) -> _JsonVocab | None:
        """None (left to the library) for a model whose vocabulary is not a plain token list, or for
        added tokens whose ids the library would not keep: it gives a token of the model's vocabulary
        the model's id and a new one the next id after the vocabulary and the added tokens so far,
        whatever id the file says."""
        model = doc.get("model") or {}
        kind, vocab = model.get("type"), model.get("vocab")
        if kind in ("BPE", "WordPiece", "WordLevel") and isinstance(vocab, dict):
            ids = {str(token): int(i) for token, i in vocab.items()}
        elif kind == "Unigram" and isinstance(vocab, list):
            ids = {str(entry[0]): i for i, entry in enumerate(vocab)}
        else:
            return None
        added: dict[str, int] = {}
        for token in doc.get("added_tokens") or []:
            content, given = str(token["content"]), int(token["id"])
            kept = ids.get(content)
            if kept is None:
                kept = max(len(ids), max(added.values(), default=-1) + 1)
            if content in added or given != kept:
                return None
            added[content] = given
        return cls(ids, added)

    def token_to_id(self, token: str) -> int | None:
        found = self.added.get(token)
        return found if found is not None else self.model.get(token)

    def size(self) -> int:
        return len(self.model.keys() | self.added.keys())


class _LibraryVocab(_Vocab):
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def token_to_id(self, token: str) -> int | None:
        found = self.tokenizer.token_to_id(token)
        return None if found is None else int(found)

    def size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))


def _from_text(file: str | Path, text: str) -> Any:
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as exc:  # the library raises plain Exception for a malformed tokenizer.json
        raise InputError(f"tokenizer {file}: cannot be loaded ({exc})") from None
    tokenizer.no_truncation()  # SWITCHED_OFF (the plan's switched_off says which were set)
    tokenizer.no_padding()
    return _pinned(file, text, tokenizer)


_PIN_LOADS = 64  # loads tried: each keeps one of two colliding ids, either about as often


def _pinned(file: str | Path, text: str, tokenizer: Any) -> Any:
    """Normalized added tokens that are the same text after normalisation (Ω U+2126 and U+03A9 under
    NFC) share one entry in `tokenizers`' matcher, which keeps the id of either, picked anew on each
    load: two processes of one run, or two runs, would write different ids for that text. storekit
    keeps the lowest id in every load (loading again until the library does), so shards are alike."""
    from tokenizers import Tokenizer

    wrong: list[tuple[str, list[int], int]] = []
    for _ in range(_PIN_LOADS):
        wrong = [(c, ids, low) for c, ids, low in _colliding(tokenizer) if ids != [low]]
        if not wrong:
            return tokenizer
        tokenizer = Tokenizer.from_str(text)
        tokenizer.no_truncation()
        tokenizer.no_padding()
    content, ids, low = wrong[0]
    raise InputError(
        f"tokenizer {file}: added token {content!r} is another token's text after normalisation, and "
        f"the tokenizers library kept id {ids} for it instead of {low} in {_PIN_LOADS} loads",
        hint="remove one of the colliding added tokens from tokenizer.json",
    )


def _colliding(tokenizer: Any) -> list[tuple[str, list[int], int]]:
    """For each group of normalized added tokens that are one text after normalisation: (a member's
    content, the ids `tokenizer` encodes it to, the group's lowest id), when those ids are one of
    the group's (else something else takes that text first and the group's choice does not show)."""
    normalizer = tokenizer.normalizer
    if normalizer is None:
        return []  # contents are distinct: no two are the same text
    groups: dict[str, list[tuple[int, str]]] = {}
    for token_id, token in tokenizer.get_added_tokens_decoder().items():
        if token.normalized:
            form = str(normalizer.normalize_str(token.content))
            groups.setdefault(form, []).append((int(token_id), str(token.content)))
    out = []
    for members in groups.values():
        if len(members) > 1:
            ids_of = {i for i, _ in members}
            content = members[0][1]
            ids = [int(i) for i in tokenizer.encode(content, add_special_tokens=False).ids]
            if len(ids) == 1 and ids[0] in ids_of:
                out.append((content, ids, min(ids_of)))
    return out


def _confirm(info: TokenizerInfo, tokenizer: Any) -> None:
    """The plan's vocabulary size and special-token ids are what the library itself says."""
    said = {
        "vocabulary size": (info.vocab_size, int(tokenizer.get_vocab_size(with_added_tokens=True))),
        f"id of {info.eos_token!r}": (info.eos_id, info.eos_token and tokenizer.token_to_id(info.eos_token)),
        f"id of {info.bos_token!r}": (info.bos_id, info.bos_token and tokenizer.token_to_id(info.bos_token)),
    }
    for what, (planned, library) in said.items():
        if planned is not None and planned != library:
            raise InputError(
                f"tokenizer {info.file}: {what} read from tokenizer.json is {planned}, "
                f"the tokenizers library says {library}",
                hint="storekit reads this tokenizer.json's layout differently from the library: "
                "please report it with the file",
            )


def _tokenizer_config(folder: Path | None) -> dict[str, Any]:
    if folder is None or not (folder / "tokenizer_config.json").is_file():
        return {}
    try:
        doc = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _special(
    vocab: _Vocab,
    which: str,
    wanted: bool,
    explicit: str | None,
    config: dict[str, Any],
    candidates: tuple[str, ...],
) -> tuple[str | None, int | None]:
    if not wanted:
        return None, None
    names: list[str] = []
    if explicit:
        names = [explicit]
    else:
        configured = config.get(f"{which}_token")
        if isinstance(configured, dict):
            configured = configured.get("content")
        if isinstance(configured, str):
            names.append(configured)
        names.extend(candidates)
    for name in names:
        token_id = vocab.token_to_id(name)
        if token_id is not None:
            return name, token_id
    flag = f"--{which}-token"
    if explicit:
        raise ConfigError("<command line>", flag, f"token {explicit!r} is not in the tokenizer's vocabulary")
    raise ConfigError(
        "<command line>",
        flag,
        f"cannot tell which token is the {which.upper()} token of this tokenizer",
        hint=f"name it with {flag} TOKEN, or turn it off with --no-{which}",
    )


def cut_rule(doc: dict[str, Any]) -> str | None:
    """The cut rule (`cuts.CUT_RULES`) under which pieces of a text encode to the ids of the whole
    text, or None: documents of this tokenizer are never cut.

    gpt2: ByteLevel with its own regex; split: a Split with one of the proven regexes
    (`pretokenizers.SPLIT_PATTERNS`, Isolated) then ByteLevel without regex. Either without a prefix
    space, with normalisers that act per character or compose nothing with ASCII, and with added tokens
    that neither contain nor swallow whitespace (they could straddle a cut). Metaspace, Prepend and
    anything else: None.
    """
    from storekit.pipeline.pretokenizers import SPLIT_PATTERNS

    pre = doc.get("pre_tokenizer") or {}
    steps = (pre.get("pretokenizers") or []) if pre.get("type") == "Sequence" else [pre]
    rule: str | None = None
    if len(steps) == 1 and steps[0].get("type") == "ByteLevel" and steps[0].get("use_regex", True):
        rule = "gpt2"
    elif (
        len(steps) == 2
        and steps[0].get("type") == "Split"
        and (steps[0].get("pattern") or {}).get("Regex") in SPLIT_PATTERNS.values()
        and steps[0].get("behavior") == "Isolated"
        and not steps[0].get("invert")
        and steps[1].get("type") == "ByteLevel"
        and not steps[1].get("use_regex", True)
    ):
        rule = "split"
    if rule is None or steps[-1].get("add_prefix_space"):
        return None
    norm = doc.get("normalizer")
    norms = (
        (norm.get("normalizers") or []) if norm and norm.get("type") == "Sequence" else [norm] if norm else []
    )
    if any(n.get("type") not in _SPLIT_SAFE_NORMALIZERS for n in norms):
        return None
    for token in doc.get("added_tokens") or []:
        # a token that contains or swallows whitespace could straddle a cut
        if (
            token.get("lstrip")
            or token.get("rstrip")
            or any(c.isspace() for c in str(token.get("content", "")))
        ):
            return None
    return rule
