"""Tiny synthetic GGUF models that llama.cpp loads in milliseconds.

They exist for the test-suite and for the packaged application's ``--self-test``: a 2-layer ``llama``
architecture with a SentencePiece (SPM) byte-fallback vocabulary, random weights from a seed. Pairs with
known relations are made by reusing a seed (identical weights: acceptance 1), adding noise to a copy
(perturbed: partial acceptance) or changing the vocabulary (mismatch).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = tuple(
    "the of and to in is that for it as was with be by on not he this are or his from at which but have "
    "an they you were her she there been one all we their has would when if will can more no out so said "
    "what up its about into than them only other new some could time these two may then do first any my "
    "now such like our over man me even most made after also did many before must through back years "
    "where much your way def return class import self print if else for while yield lambda none true "
    "false int str list dict speculative decoding draft target token model accept reject".split()
)

# SentencePiece token types as llama.cpp reads them (gguf.TokenType values).
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6


@dataclass(frozen=True)
class TinyModelSpec:
    """What a tiny model looks like.

    Args:
        seed: seed of the random weights.
        n_embd: embedding width.
        n_layer: transformer blocks.
        n_head: attention heads.
        n_ff: feed-forward width.
        n_ctx_train: the context length written to the metadata.
        weight_scale: standard deviation of the weights; larger gives peakier next-token distributions.
        noise: relative Gaussian noise added to every weight after generation (0 = none), with its own seed,
            which turns a copy of a model into a "perturbed" draft.
        noise_seed: seed of that noise.
        vocab_shuffle_seed: when set, the ordinary tokens get different ids, so the vocabulary differs
            from every model made without it.
        extra_words: extra ordinary tokens appended to the vocabulary (changes its size).
        eos_token_id: override of the end-of-sequence id (default 2, ``</s>``).
        name: ``general.name`` in the metadata.
        quantized: store the matrices as Q8_0 (llama.cpp's quantized kernels, as real models use) instead
            of F32.
        quant: the quantized type's name (``gguf.GGMLQuantizationType``: ``Q8_0``, or ``Q4_0``, which llama.cpp
            repacks on x86 CPUs).
        deep_from: blocks from this one on write into the residual stream with ``deep_scale`` times the usual
            weights (their attention and feed-forward output projections). The weights are drawn block by
            block, so a model with ``n_layer = deep_from`` and the same seed is exactly the first blocks of
            this one: an early-exit draft, cheaper than the target and close to it when ``deep_scale`` is small.
        deep_scale: see ``deep_from``.
        attention: scale of every block's attention output projection; 0 makes a bigram model (the next token
            depends on the current one alone), whose answers soon repeat themselves, so prompt lookup and the
            n-gram cache find drafts that are right.
        arch: ``llama`` (attention) or ``mamba`` (a recurrent state-space model: its state cannot simply be cut
            back to an earlier position as an attention cache can, which speculation relies on).
    """

    seed: int = 0
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_ff: int = 128
    n_ctx_train: int = 4096
    weight_scale: float = 2.0
    noise: float = 0.0
    noise_seed: int = 1
    vocab_shuffle_seed: int | None = None
    extra_words: tuple[str, ...] = field(default_factory=tuple)
    eos_token_id: int = 2
    name: str = "tiny-llama"
    quantized: bool = False
    quant: str = "Q8_0"
    deep_from: int = 0
    deep_scale: float = 1.0
    attention: float = 1.0
    arch: str = "llama"


def tiny_vocab(spec: TinyModelSpec) -> tuple[list[str], list[float], list[int]]:
    """Build the SPM byte-fallback vocabulary of a tiny model.

    Returns:
        The token texts, their scores and their token types.
    """
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [_UNKNOWN, _CONTROL, _CONTROL, _CONTROL, _CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [_BYTE] * 256
    pieces: list[str] = ["▁"]
    for ch in string.ascii_letters + string.digits + string.punctuation:
        pieces += [ch, "▁" + ch]
    for word in (*_WORDS, *spec.extra_words):
        for end in range(2, len(word) + 1):
            pieces.append("▁" + word[:end])
            pieces.append(word[:end])
    ordinary = list(dict.fromkeys(pieces))  # unique, in a stable order
    if spec.vocab_shuffle_seed is not None:
        np.random.default_rng(spec.vocab_shuffle_seed).shuffle(ordinary)
    tokens += ordinary
    types += [_NORMAL] * len(ordinary)
    # SPM merges by score: longer pieces win, so words become one token when they can.
    scores = [0.0] * (len(tokens) - len(ordinary)) + [float(len(p)) - 100.0 for p in ordinary]
    return tokens, scores, types


def write_tiny_model(path: Path, spec: TinyModelSpec | None = None) -> Path:
    """Write a tiny ``llama`` GGUF model to ``path``.

    Args:
        path: the file to write (its parent must exist).
        spec: the model's shape and seeds.

    Returns:
        ``path``.
    """
    from speculens.models.gguf_info import gguf  # imported there without the tokenizer packages

    spec = spec or TinyModelSpec()
    tokens, scores, types = tiny_vocab(spec)
    n_vocab = len(tokens)
    rng = np.random.default_rng(spec.seed)
    noise_rng = np.random.default_rng(spec.noise_seed)

    def weight(*shape: int, scale: float | None = None) -> np.ndarray:
        w = rng.normal(0.0, spec.weight_scale if scale is None else scale, size=shape).astype(np.float32)
        if spec.noise:
            w += noise_rng.normal(0.0, spec.noise * float(np.std(w)) + 1e-12, size=shape).astype(np.float32)
        return w

    writer = gguf.GGUFWriter(None, spec.arch)
    writer.add_name(spec.name)
    writer.add_context_length(spec.n_ctx_train)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_layer_norm_rms_eps(1e-5)
    if spec.arch == "mamba":
        d_inner, d_state, d_conv, dt_rank = 2 * spec.n_embd, 16, 4, max(1, spec.n_embd // 16)
        writer.add_feed_forward_length(0)
        writer.add_head_count(0)
        writer.add_ssm_conv_kernel(d_conv)
        writer.add_ssm_inner_size(d_inner)
        writer.add_ssm_state_size(d_state)
        writer.add_ssm_time_step_rank(dt_rank)
    elif spec.arch == "llama":
        writer.add_feed_forward_length(spec.n_ff)
        writer.add_head_count(spec.n_head)
        writer.add_head_count_kv(spec.n_head)
        writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
    else:
        raise ValueError(f"arch must be llama or mamba, not {spec.arch!r}")
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType[f"MOSTLY_{spec.quant}"] if spec.quantized else gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(spec.eos_token_id)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)

    ones = np.ones(spec.n_embd, dtype=np.float32)

    def matrix(name: str, w: np.ndarray) -> None:
        if spec.quantized:
            q = gguf.GGMLQuantizationType[spec.quant]
            writer.add_tensor(name, gguf.quants.quantize(w, q), raw_dtype=q)
        else:
            writer.add_tensor(name, w)

    matrix("token_embd.weight", weight(n_vocab, spec.n_embd, scale=1.0))
    writer.add_tensor("output_norm.weight", ones)
    matrix("output.weight", weight(n_vocab, spec.n_embd))
    for i in range(spec.n_layer):
        out = spec.deep_scale if spec.deep_from and i >= spec.deep_from else 1.0
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        if spec.arch == "mamba":
            # Shapes as numpy sees them (GGUF lists dimensions the other way round); A = -exp(A_log) < 0.
            matrix(f"blk.{i}.ssm_in.weight", weight(2 * d_inner, spec.n_embd))
            writer.add_tensor(f"blk.{i}.ssm_conv1d.weight", weight(d_inner, d_conv))
            writer.add_tensor(f"blk.{i}.ssm_conv1d.bias", weight(d_inner))
            writer.add_tensor(f"blk.{i}.ssm_x.weight", weight(dt_rank + 2 * d_state, d_inner))
            writer.add_tensor(f"blk.{i}.ssm_dt.weight", weight(d_inner, dt_rank))
            writer.add_tensor(f"blk.{i}.ssm_dt.bias", weight(d_inner))
            writer.add_tensor(f"blk.{i}.ssm_a", -np.exp(weight(d_inner, d_state, scale=0.5)))
            writer.add_tensor(f"blk.{i}.ssm_d", np.ones(d_inner, dtype=np.float32))
            matrix(f"blk.{i}.ssm_out.weight", out * weight(spec.n_embd, d_inner))
            continue
        matrix(f"blk.{i}.attn_q.weight", weight(spec.n_embd, spec.n_embd))
        matrix(f"blk.{i}.attn_k.weight", weight(spec.n_embd, spec.n_embd))
        matrix(f"blk.{i}.attn_v.weight", weight(spec.n_embd, spec.n_embd))
        matrix(f"blk.{i}.attn_output.weight", spec.attention * out * weight(spec.n_embd, spec.n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        matrix(f"blk.{i}.ffn_gate.weight", weight(spec.n_ff, spec.n_embd))
        matrix(f"blk.{i}.ffn_up.weight", weight(spec.n_ff, spec.n_embd))
        matrix(f"blk.{i}.ffn_down.weight", out * weight(spec.n_embd, spec.n_ff))
    tmp = path.with_name(path.name + ".tmp")
    # Write under a temporary name, then rename: never a half-written model.
    writer.write_header_to_file(path=tmp)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def write_tiny_pair(folder: Path, relation: str, seed: int = 0) -> tuple[Path, Path]:
    """Write a target and a draft with a known relation.

    Args:
        folder: where to write them.
        relation: ``identical`` (same weights), ``perturbed`` (noisy copy of the target) or ``mismatch``
            (a draft with a different vocabulary).
        seed: seed of the target's weights.

    Returns:
        The target's and the draft's paths.
    """
    base = TinyModelSpec(seed=seed, name="tiny-target")
    drafts = {
        "identical": replace(base, name="tiny-draft-identical"),
        "perturbed": replace(base, noise=0.02, name="tiny-draft-perturbed"),
        "mismatch": replace(base, vocab_shuffle_seed=7, name="tiny-draft-mismatch"),
    }
    if relation not in drafts:
        raise ValueError(f"relation must be one of {sorted(drafts)}, not {relation!r}")
    target = write_tiny_model(folder / f"tiny-target-{seed}.gguf", base)
    draft = write_tiny_model(folder / f"tiny-draft-{relation}-{seed}.gguf", drafts[relation])
    return target, draft
