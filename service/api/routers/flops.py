"""FLOPs per token under a named convention, broken down by component."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.json_body import StrictJsonRoute
from service.api.resolve import resolve_model, with_field_prefix
from service.api.schemas.efficiency import FlopsComponentsRead, FlopsRead, FlopsRequest
from service.domain import flops, models

router = APIRouter(tags=["flops"], route_class=StrictJsonRoute)

_NOTES = {
    "palm": "PaLM Appendix B: 6·N + 12·L·H·Q·s per token; attention scores counted non-causally (full s×s).",
    "6n": "6·N per token, no attention-score term; N by embedding_policy (default: Kaplan's non-embedding N).",
    "kaplan": "Kaplan et al. 2020 §2.1: 6·N per token, N = non-embedding parameters (output head excluded too).",
    "hf_trainer": "Hugging Face Trainer total_flos: 6·N per token, N = num_parameters(exclude_embeddings=True): "
    "all parameters (every expert) minus nn.Embedding weights, so an untied lm_head counts.",
    "megatron": "Megatron-LM num_floating_point_operations (core ≤ 0.11): every GEMM counted, logits included, "
    "embedding lookup not; scores non-causal.",
    "megatron_causal": "Megatron GEMM count with causal attention scores (half of s×s; sliding windows capped), "
    "as Megatron-Core ≥ 0.12.",
}


def _components(components: flops.FlopsComponents) -> FlopsComponentsRead:
    return FlopsComponentsRead(
        attention_projections_flops=components.attention_projections_flops,
        attention_scores_flops=components.attention_scores_flops,
        mlp_flops=components.mlp_flops,
        logits_flops=components.logits_flops,
        other_flops=components.other_flops,
        total_flops=components.total_flops,
    )


@router.post("/flops", summary="FLOPs per token and per sequence, by component, under a named convention")
async def compute_flops(request: FlopsRequest) -> FlopsRead:
    spec = resolve_model(request.model)
    breakdown = with_field_prefix(
        "body",
        lambda: flops.flops_per_token(
            spec,
            request.seq_len_tokens,
            convention=request.convention,
            recompute=request.recompute,
            embedding_policy=request.embedding_policy,
            parameter_count=request.parameter_count,
        ),
    )
    counts = models.count_parameters(spec)
    notes = [_NOTES[request.convention], "A multiply-add counts 2 FLOPs; training = 3 × forward."]
    if request.recompute != "none":
        notes.append(
            f"{request.recompute} recomputation adds {breakdown.recompute_flops_per_token:.4g} FLOPs/token to HFU."
        )
    return FlopsRead(
        convention=breakdown.convention,
        embedding_policy=breakdown.embedding_policy,
        recompute=breakdown.recompute,
        seq_len_tokens=breakdown.seq_len_tokens,
        parameter_count_used=breakdown.parameter_count,
        total_parameters=counts.total,
        active_parameters_per_token=counts.active_per_token,
        forward_per_token=_components(breakdown.forward),
        training_per_token=_components(breakdown.training),
        recompute_flops_per_token=breakdown.recompute_flops_per_token,
        forward_flops_per_token=breakdown.forward_flops_per_token,
        training_flops_per_token=breakdown.training_flops_per_token,
        hardware_flops_per_token=breakdown.hardware_flops_per_token,
        forward_flops_per_sequence=breakdown.forward_flops_per_sequence,
        training_flops_per_sequence=breakdown.training_flops_per_sequence,
        hardware_flops_per_sequence=breakdown.hardware_flops_per_sequence,
        notes=notes,
    )
