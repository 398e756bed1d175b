"""FLOPs per token under named conventions, with a breakdown by component.

A multiply-add counts as 2 FLOPs; training = forward + backward = 3 × forward for every matmul
(Kaplan et al. 2020 §2.1; PaLM Appendix B). Model FLOPs exclude recomputation, hardware FLOPs include
it (PaLM Appendix B). The conventions (``reference/flops_and_mfu.md``):

``palm`` (default)
    6·N + 12·L·H·Q·s per token, non-causal attention (Chowdhery et al. 2022, Appendix B). N = the
    parameters one token uses (active parameters for MoE) under ``embedding_policy``, default ``all``
    (PaLM, and MosaicML llm-foundry's MFU: all parameters incl. embeddings). torchtitan and nanoGPT use
    ``exclude_input``. The score term is generalised to 6·L·H·(d_qk + d_v)·s, which is 12·L·H·Q·s when
    queries, keys and values share the head width Q (and covers MLA's 192/128 split).
``6n``
    6·N per token, no attention term, N chosen by ``embedding_policy`` (default ``exclude_all``).
``kaplan``
    6·N per token with Kaplan et al. 2020 §2.1's N: non-embedding parameters (every vocabulary and
    position matrix out, the output head too), the ones a token uses. Llama 3 8B: 41.9 GFLOP/token.
``hf_trainer``
    What Hugging Face Trainer logs as ``total_flos``: ``floating_point_ops`` = 6 × tokens ×
    ``num_parameters(exclude_embeddings=True)`` (transformers ``modeling_utils.py``), which drops only
    ``nn.Embedding`` weights: the input token embedding (with the head, when tied: one tensor) and
    learned positions. An untied ``lm_head`` counts, and every expert of an MoE counts (N is the
    module's total, not the active parameters). Llama 3 8B: 45.0 GFLOP/token.
``megatron``
    Megatron-LM ``num_floating_point_operations`` (core ≤ 0.11), per token:
    6·[L·(h·H·Q + 2·h·g·Q + H·Q·h) + h·f·c per dense layer + h·c·(k·f_e + n_s·f_s) per MoE layer + h·V]
    + 12·L·H·Q·s; c = 2 plain, 3 gated; logits counted, embedding lookup, biases, norms and the
    router not. MLA layers count their actual down/up projections.
``megatron_causal``
    The same linear terms with causal attention: each query attends to (s+1)/2 ≈ s/2 keys on average
    (Megatron-core ≥ 0.12 halves the score term: 6·L·H·Q·s). A sliding window w < s caps the
    attended length at w − w²/(2s) on the layers that use it.

Recomputation (``recompute``): ``none``; ``selective`` re-runs the forward of the attention core (QK^T,
softmax, AV; Korthikanti et al. 2022 §5); ``full`` re-runs one forward of every transformer layer
(attention, MLP, norms) but not the logits, which sit outside the checkpointed layers (Narayanan et
al. 2021 Eq. 3 counts them 3×, not 4×).

Per-step forms used by published runs: :func:`narayanan_step_flops` (Eq. 3, with its recompute
factor) and :func:`korthikanti_step_flops` (the MFU form of Korthikanti et al. 2022).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal, get_args

from service.domain.errors import InvalidInput
from service.domain.models import ModelSpec, count_parameters, layer_parameters

Convention = Literal["palm", "6n", "kaplan", "hf_trainer", "megatron", "megatron_causal"]
EmbeddingPolicy = Literal["all", "exclude_input", "exclude_all"]
Recompute = Literal["none", "selective", "full"]

CONVENTIONS: tuple[str, ...] = get_args(Convention)
EMBEDDING_POLICIES: tuple[str, ...] = get_args(EmbeddingPolicy)
RECOMPUTE_MODES: tuple[str, ...] = get_args(Recompute)
DEFAULT_CONVENTION: Convention = "palm"

# The N each parameter-count convention uses by default (module docstring says why).
DEFAULT_EMBEDDING_POLICY: dict[str, EmbeddingPolicy] = {"palm": "all", "6n": "exclude_all"}

#: Training = forward + backward (2× forward) for every matmul (Kaplan et al. 2020 §2.1).
TRAINING_TO_FORWARD = 3


@dataclass(frozen=True, slots=True)
class FlopsComponents:
    """FLOPs per token by component (all in FLOPs, a multiply-add = 2).

    ``attention_projections_flops``: Q, K, V and output projections. ``attention_scores_flops``: QK^T
    and AV. ``mlp_flops``: dense FFN or the experts a token uses (routed + shared; under the N-based
    conventions also the router). ``logits_flops``: the output projection (under the N-based
    conventions: 2× the embedding parameters N counts). ``other_flops``: norms and anything else N counts.
    """

    attention_projections_flops: float
    attention_scores_flops: float
    mlp_flops: float
    logits_flops: float
    other_flops: float = 0.0

    @property
    def total_flops(self) -> float:
        return (
            self.attention_projections_flops
            + self.attention_scores_flops
            + self.mlp_flops
            + self.logits_flops
            + self.other_flops
        )

    def scaled(self, factor: float) -> FlopsComponents:
        return FlopsComponents(
            self.attention_projections_flops * factor,
            self.attention_scores_flops * factor,
            self.mlp_flops * factor,
            self.logits_flops * factor,
            self.other_flops * factor,
        )


_ZERO = FlopsComponents(0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class FlopsBreakdown:
    """FLOPs per token (and per sequence) for one model, sequence length and convention.

    ``training_flops_per_token`` is the model FLOPs MFU uses; ``hardware_flops_per_token`` adds the
    recomputation HFU uses. ``parameter_count`` is the N of the ``palm``/``6n`` formulas (None for the
    Megatron conventions, which count GEMMs).
    """

    convention: Convention
    embedding_policy: EmbeddingPolicy | None
    recompute: Recompute
    seq_len_tokens: int
    parameter_count: int | float | None
    forward: FlopsComponents
    recompute_extra: FlopsComponents

    @property
    def training(self) -> FlopsComponents:
        return self.forward.scaled(TRAINING_TO_FORWARD)

    @property
    def forward_flops_per_token(self) -> float:
        return self.forward.total_flops

    @property
    def training_flops_per_token(self) -> float:
        return TRAINING_TO_FORWARD * self.forward.total_flops

    @property
    def recompute_flops_per_token(self) -> float:
        return self.recompute_extra.total_flops

    @property
    def hardware_flops_per_token(self) -> float:
        return self.training_flops_per_token + self.recompute_flops_per_token

    @property
    def forward_flops_per_sequence(self) -> float:
        return self.forward_flops_per_token * self.seq_len_tokens

    @property
    def training_flops_per_sequence(self) -> float:
        return self.training_flops_per_token * self.seq_len_tokens

    @property
    def hardware_flops_per_sequence(self) -> float:
        return self.hardware_flops_per_token * self.seq_len_tokens


def _check_choice(value: str, choices: tuple[str, ...], field: str) -> None:
    if value not in choices:
        raise InvalidInput(f"{field} must be one of {', '.join(choices)}, got {value!r}.", field=field)


def _check_positive_int(value: int, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"{field} must be a positive integer, got {value!r}.", field=field)


def _check_positive_number(value: float, field: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not value > 0
        or value == float("inf")
    ):
        raise InvalidInput(f"{field} must be a positive finite number, got {value!r}.", field=field)


def attended_tokens(seq_len_tokens: int, *, causal: bool, window_tokens: int | None = None) -> float:
    """Keys each query attends to, on average over a sequence of ``seq_len_tokens``.

    Non-causal: all ``s`` (PaLM, Megatron ≤ 0.11; the window is not applied). Causal: ``s/2``
    (Megatron-core ≥ 0.12; the exact mean is (s+1)/2), and with a window ``w < s`` the mean of
    min(i, w) over positions, w − w²/(2s) in the same continuous approximation (equal to s/2 at w = s).
    """
    s = float(seq_len_tokens)
    if not causal:
        return s
    if window_tokens is None or window_tokens >= seq_len_tokens:
        return s / 2
    w = float(window_tokens)
    return w - w * w / (2 * s)


def parameter_count_for(spec: ModelSpec, embedding_policy: EmbeddingPolicy) -> int:
    """The N of the ``palm``/``6n`` formulas: active parameters per token under a policy.

    ``all``: every parameter a token uses. ``exclude_input``: minus the position embeddings and the
    input token embedding unless it is tied to the output projection (torchtitan
    ``get_num_flop_per_token``, nanoGPT ``get_num_params``: lookups do no matmul). ``exclude_all``: minus
    every vocabulary and position matrix (Kaplan et al. 2020 §2.1 non-embedding N).
    """
    counts = count_parameters(spec)
    if embedding_policy == "all":
        return counts.active_per_token
    if embedding_policy == "exclude_input":
        lookup = counts.position_embedding + (0 if spec.tied_embeddings else counts.input_embedding)
        return counts.active_per_token - lookup
    return counts.active_per_token - counts.embedding


def hf_trainer_parameter_count(spec: ModelSpec) -> int:
    """``num_parameters(exclude_embeddings=True)`` of the transformers module: all parameters (every
    expert) minus the input token embedding and learned positions, tied or not."""
    counts = count_parameters(spec)
    return counts.total - counts.input_embedding - counts.position_embedding


def _score_forward_flops(spec: ModelSpec, seq_len_tokens: int, *, causal: bool) -> float:
    """2·H·(d_qk + d_v)·attended per layer per token (QK^T and AV), summed over layers."""
    per_key = 2 * spec.n_heads * (spec.qk_head_dim + spec.value_head_dim)
    windowed = spec.n_sliding_window_layers if causal else 0
    full = spec.n_layers - windowed
    total = full * attended_tokens(seq_len_tokens, causal=causal)
    if windowed:
        total += windowed * attended_tokens(seq_len_tokens, causal=True, window_tokens=spec.sliding_window)
    return per_key * total


def _recompute_extra(forward: FlopsComponents, recompute: Recompute) -> FlopsComponents:
    if recompute == "none":
        return _ZERO
    if recompute == "selective":
        return FlopsComponents(0.0, forward.attention_scores_flops, 0.0, 0.0, 0.0)
    return FlopsComponents(
        forward.attention_projections_flops,
        forward.attention_scores_flops,
        forward.mlp_flops,
        0.0,
        forward.other_flops,
    )


@functools.lru_cache(maxsize=8192)
def flops_per_token(
    spec: ModelSpec,
    seq_len_tokens: int,
    *,
    convention: Convention = DEFAULT_CONVENTION,
    recompute: Recompute = "none",
    embedding_policy: EmbeddingPolicy | None = None,
    parameter_count: int | float | None = None,
) -> FlopsBreakdown:
    """FLOPs per token of ``spec`` at ``seq_len_tokens`` under ``convention`` (module docstring).

    ``embedding_policy`` chooses N for ``palm``/``6n`` (default: ``all`` for palm, ``exclude_all`` for
    6n). ``parameter_count`` replaces the derived N with a published one (PaLM Appendix B uses
    N = 540.35e9); the parameter components are then scaled so that they sum to 2·N.
    """
    _check_positive_int(seq_len_tokens, "seq_len_tokens")
    _check_choice(convention, CONVENTIONS, "convention")
    _check_choice(recompute, RECOMPUTE_MODES, "recompute")
    if embedding_policy is not None:
        _check_choice(embedding_policy, EMBEDDING_POLICIES, "embedding_policy")
    if parameter_count is not None:
        _check_positive_number(parameter_count, "parameter_count")

    if convention in ("kaplan", "hf_trainer"):
        if embedding_policy is not None:
            raise InvalidInput(
                f"the {convention} convention fixes its N ({'non-embedding' if convention == 'kaplan' else 'HF num_parameters(exclude_embeddings=True)'}); "
                "drop embedding_policy, or choose convention 6n to pick N.",
                field="embedding_policy",
            )
        counts = count_parameters(spec)
        if convention == "kaplan":
            n_fixed = parameter_count_for(spec, "exclude_all")
            mlp = counts.mlp_active
        else:
            n_fixed = hf_trainer_parameter_count(spec)
            mlp = counts.mlp
        parameter_part = FlopsComponents(
            attention_projections_flops=2.0 * counts.attention,
            attention_scores_flops=0.0,
            mlp_flops=2.0 * mlp,
            logits_flops=2.0 * (n_fixed - counts.attention - mlp - counts.norms),
            other_flops=2.0 * counts.norms,
        )
        if parameter_count is not None:
            parameter_part = parameter_part.scaled(parameter_count / n_fixed)
            if not math.isfinite(TRAINING_TO_FORWARD * parameter_part.total_flops):
                raise InvalidInput(
                    f"parameter_count {parameter_count:.4g} gives more FLOPs per token than a float holds.",
                    field="parameter_count",
                )
        return FlopsBreakdown(
            convention=convention,
            embedding_policy=None,
            recompute=recompute,
            seq_len_tokens=seq_len_tokens,
            parameter_count=parameter_count if parameter_count is not None else n_fixed,
            forward=parameter_part,
            recompute_extra=_recompute_extra(parameter_part, recompute),
        )

    if convention in ("palm", "6n"):
        policy: EmbeddingPolicy = embedding_policy or DEFAULT_EMBEDDING_POLICY[convention]
        counts = count_parameters(spec)
        n_counted = parameter_count_for(spec, policy)
        parameter_part = FlopsComponents(
            attention_projections_flops=2.0 * counts.attention,
            attention_scores_flops=0.0,
            mlp_flops=2.0 * counts.mlp_active,
            logits_flops=2.0 * (n_counted - counts.attention - counts.mlp_active - counts.norms),
            other_flops=2.0 * counts.norms,
        )
        if parameter_count is not None:
            parameter_part = parameter_part.scaled(parameter_count / n_counted)
            if not math.isfinite(TRAINING_TO_FORWARD * parameter_part.total_flops):
                raise InvalidInput(
                    f"parameter_count {parameter_count:.4g} gives more FLOPs per token than a float holds; "
                    "give the model's parameter count (e.g. 8.03e9).",
                    field="parameter_count",
                )
        scores = _score_forward_flops(spec, seq_len_tokens, causal=False) if convention == "palm" else 0.0
        forward = FlopsComponents(
            parameter_part.attention_projections_flops,
            scores,
            parameter_part.mlp_flops,
            parameter_part.logits_flops,
            parameter_part.other_flops,
        )
        return FlopsBreakdown(
            convention=convention,
            embedding_policy=policy,
            recompute=recompute,
            seq_len_tokens=seq_len_tokens,
            parameter_count=parameter_count if parameter_count is not None else n_counted,
            forward=forward,
            recompute_extra=_recompute_extra(forward, recompute),
        )

    if embedding_policy is not None or parameter_count is not None:
        field = "embedding_policy" if embedding_policy is not None else "parameter_count"
        raise InvalidInput(
            f"{field} applies to the palm and 6n conventions only; the {convention} convention counts "
            "each matmul from the dimensions. Drop it or choose convention palm.",
            field=field,
        )
    lp = layer_parameters(spec)
    n_moe = spec.n_moe_layers
    mlp = (spec.n_layers - n_moe) * lp.dense_mlp_weights + n_moe * (
        spec.experts_per_token * lp.moe_expert_weights + lp.moe_shared_weights
    )
    forward = FlopsComponents(
        attention_projections_flops=2.0 * spec.n_layers * lp.attention_weights,
        attention_scores_flops=_score_forward_flops(
            spec, seq_len_tokens, causal=convention == "megatron_causal"
        ),
        mlp_flops=2.0 * mlp,
        logits_flops=2.0 * spec.d_model * spec.vocab_size,
    )
    return FlopsBreakdown(
        convention=convention,
        embedding_policy=None,
        recompute=recompute,
        seq_len_tokens=seq_len_tokens,
        parameter_count=None,
        forward=forward,
        recompute_extra=_recompute_extra(forward, recompute),
    )


def palm_flops_per_token(
    *, parameter_count: float, n_layers: int, attention_width: int, seq_len_tokens: int
) -> float:
    """6·N + 12·L·H·Q·s: training FLOPs per token, PaLM (Chowdhery et al. 2022) Appendix B.

    ``attention_width`` is H·Q. For a caller who has N and the attention shape but no full model.
    """
    _check_positive_number(parameter_count, "parameter_count")
    _check_positive_int(n_layers, "n_layers")
    _check_positive_int(attention_width, "attention_width")
    _check_positive_int(seq_len_tokens, "seq_len_tokens")
    return 6.0 * parameter_count + 12.0 * n_layers * attention_width * seq_len_tokens


def _check_step_inputs(
    batch_sequences: int, seq_len_tokens: int, n_layers: int, d_model: int, vocab_size: int
) -> None:
    for value, field in (
        (batch_sequences, "batch_sequences"),
        (seq_len_tokens, "seq_len_tokens"),
        (n_layers, "n_layers"),
        (d_model, "d_model"),
        (vocab_size, "vocab_size"),
    ):
        _check_positive_int(value, field)


def narayanan_step_flops(
    *,
    batch_sequences: int,
    seq_len_tokens: int,
    n_layers: int,
    d_model: int,
    vocab_size: int,
    full_recompute: bool = True,
) -> float:
    """FLOPs per training step of a plain GPT, Narayanan et al. 2021 (arXiv 2104.04473) Eq. 3.

    24·c·B·s·L·h²·(1 + s/(6h) + V/(16·L·h)) with c = 4 under full activation recomputation (Eq. 3 as
    printed: 96·B·s·L·h²·(…)) and c = 3 without (Megatron-DeepSpeed / BigScience / NeoX logs). With
    c = 4 it is a hardware-FLOPs (HFU) count.
    """
    _check_step_inputs(batch_sequences, seq_len_tokens, n_layers, d_model, vocab_size)
    c = 4 if full_recompute else 3
    h = float(d_model)
    return (
        24.0
        * c
        * batch_sequences
        * seq_len_tokens
        * n_layers
        * h
        * h
        * (1 + seq_len_tokens / (6 * h) + vocab_size / (16 * n_layers * h))
    )


def korthikanti_step_flops(
    *, batch_sequences: int, seq_len_tokens: int, n_layers: int, d_model: int, vocab_size: int
) -> float:
    """Model FLOPs per training step of a plain GPT (f = 4h), Korthikanti et al. 2022 (arXiv 2205.05198).

    72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)): no recomputation, non-causal attention, logits counted.
    It equals the ``megatron`` convention for Q·H = h, g = H, f = 4h, plain MLP.
    """
    _check_step_inputs(batch_sequences, seq_len_tokens, n_layers, d_model, vocab_size)
    h = float(d_model)
    return (
        72.0
        * batch_sequences
        * seq_len_tokens
        * n_layers
        * h
        * h
        * (1 + seq_len_tokens / (6 * h) + vocab_size / (12 * n_layers * h))
    )
