"""Well-known architectures as presets, with their published sizes beside the derived counts."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

from service.domain.errors import NotFound
from service.domain.models.spec import ModelSpec, build_model_spec


@dataclass(frozen=True, slots=True)
class Preset:
    """A well-known architecture with its published dimensions and, where published, its size."""

    id: str
    display_name: str
    family: str
    spec: ModelSpec
    source: str
    published_parameters: float | None = None
    published_active_parameters: float | None = None


_GPT3_SOURCE = "Brown et al. 2020 (arXiv 2005.14165) Table 2.1; vocab 50257, context 2048"


def _gpt3(size: str, n_layers: int, d_model: int, n_heads: int, head_dim: int, params: float) -> Preset:
    spec = build_model_spec(
        name=f"GPT-3 {size}",
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        head_dim=head_dim,
        d_ff=4 * d_model,
        vocab_size=50257,
        ffn_kind="plain",
        tied_embeddings=True,
        position_embedding="learned",
        max_position_embeddings=2048,
        norm_kind="layernorm",
        norm_has_bias=True,
        qkv_bias=True,
        attn_out_bias=True,
        mlp_bias=True,
    )
    return Preset(f"gpt3-{size.lower()}", f"GPT-3 {size}", "gpt3", spec, _GPT3_SOURCE, params)


def _llama(
    preset_id: str,
    display: str,
    family: str,
    source: str,
    params: float | None,
    **dims: Any,
) -> Preset:
    return Preset(preset_id, display, family, build_model_spec(name=display, **dims), source, params)


def _build_presets() -> dict[str, Preset]:
    presets = [
        _gpt3("125M", 12, 768, 12, 64, 125e6),
        _gpt3("350M", 24, 1024, 16, 64, 350e6),
        _gpt3("760M", 24, 1536, 16, 96, 760e6),
        # Table 2.1 prints 24 heads of 128 for 1.3B, which does not fit d_model 2048 (24·128 = 3072);
        # 16 heads of 128 (Megatron-LM's GPT-3 1.3B) keeps H·Q = d_model and the published 1.3B.
        _gpt3("1.3B", 24, 2048, 16, 128, 1.3e9),
        _gpt3("2.7B", 32, 2560, 32, 80, 2.7e9),
        _gpt3("6.7B", 32, 4096, 32, 128, 6.7e9),
        _gpt3("13B", 40, 5140, 40, 128, 13.0e9),  # d_model 5140 as printed in Table 2.1
        _gpt3("175B", 96, 12288, 96, 128, 175.0e9),
    ]
    llama2 = "Touvron et al. 2023 (Llama 2, arXiv 2307.09288) Table 1; meta-llama/Llama-2-*-hf config.json"
    presets += [
        _llama("llama2-7b", "Llama 2 7B", "llama2", llama2, 6.74e9,
               n_layers=32, d_model=4096, n_heads=32, d_ff=11008, vocab_size=32000),
        _llama("llama2-13b", "Llama 2 13B", "llama2", llama2, 13.0e9,
               n_layers=40, d_model=5120, n_heads=40, d_ff=13824, vocab_size=32000),
        _llama("llama2-70b", "Llama 2 70B", "llama2", llama2, 69.0e9,
               n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, d_ff=28672, vocab_size=32000),
    ]  # fmt: skip
    llama3 = "Llama 3 herd (Dubey et al. 2024, arXiv 2407.21783) Table 3; meta-llama config.json"
    dims_8b = dict(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=128256)
    dims_70b = dict(n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, d_ff=28672, vocab_size=128256)
    dims_405b = dict(n_layers=126, d_model=16384, n_heads=128, n_kv_heads=8, d_ff=53248, vocab_size=128256)
    presets += [
        _llama("llama3-8b", "Llama 3 8B", "llama3", llama3, 8.03e9, **dims_8b),
        _llama("llama3-70b", "Llama 3 70B", "llama3", llama3, 70.6e9, **dims_70b),
        _llama("llama3.1-8b", "Llama 3.1 8B", "llama3", llama3, 8.03e9, **dims_8b),
        _llama("llama3.1-70b", "Llama 3.1 70B", "llama3", llama3, 70.6e9, **dims_70b),
        _llama("llama3.1-405b", "Llama 3.1 405B", "llama3", llama3, 405.9e9, **dims_405b),
    ]
    mistral = "Jiang et al. 2023 (Mistral 7B, arXiv 2310.06825) Table 1; mistralai config.json"
    mixtral = "Jiang et al. 2024 (Mixtral of Experts, arXiv 2401.04088) Table 1; mistralai config.json"
    presets += [
        _llama("mistral-7b", "Mistral 7B (v0.1)", "mistral", mistral, 7.24e9,
               n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=32000,
               sliding_window=4096),
        _llama("mixtral-8x7b", "Mixtral 8x7B", "mixtral", mixtral, 46.7e9,
               n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab_size=32000,
               n_experts=8, experts_per_token=2, expert_d_ff=14336),
        _llama("mixtral-8x22b", "Mixtral 8x22B", "mixtral",
               "mistralai/Mixtral-8x22B-v0.1 config.json and announcement (141B total, 39B active)", 141e9,
               n_layers=56, d_model=6144, n_heads=48, n_kv_heads=8, d_ff=16384, vocab_size=32768,
               n_experts=8, experts_per_token=2, expert_d_ff=16384),
    ]  # fmt: skip
    qwen = "Qwen2.5 technical report (arXiv 2412.15115) Table 1; Qwen/Qwen2.5-* config.json"
    qwen_opts = dict(qkv_bias=True)
    presets += [
        _llama("qwen2.5-0.5b", "Qwen2.5 0.5B", "qwen2.5", qwen, 0.49e9,
               n_layers=24, d_model=896, n_heads=14, n_kv_heads=2, d_ff=4864, vocab_size=151936,
               tied_embeddings=True, **qwen_opts),
        _llama("qwen2.5-7b", "Qwen2.5 7B", "qwen2.5", qwen, 7.61e9,
               n_layers=28, d_model=3584, n_heads=28, n_kv_heads=4, d_ff=18944, vocab_size=152064,
               **qwen_opts),
        _llama("qwen2.5-14b", "Qwen2.5 14B", "qwen2.5", qwen, 14.7e9,
               n_layers=48, d_model=5120, n_heads=40, n_kv_heads=8, d_ff=13824, vocab_size=152064,
               **qwen_opts),
        _llama("qwen2.5-72b", "Qwen2.5 72B", "qwen2.5", qwen, 72.7e9,
               n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, d_ff=29568, vocab_size=152064,
               **qwen_opts),
    ]  # fmt: skip
    qwen3_moe = (
        "Qwen3 technical report (arXiv 2505.09388) Table 2; Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B "
        "config.json: every layer MoE (128 experts, 8 routed, no shared expert), head_dim 128, untied "
        "embeddings"
    )
    presets += [
        _llama("qwen3-30b-a3b", "Qwen3 30B-A3B", "qwen3-moe", qwen3_moe, 30.5e9,
               n_layers=48, d_model=2048, n_heads=32, n_kv_heads=4, head_dim=128, d_ff=6144,
               vocab_size=151936, n_experts=128, experts_per_token=8, expert_d_ff=768),
        _llama("qwen3-235b-a22b", "Qwen3 235B-A22B", "qwen3-moe", qwen3_moe, 235e9,
               n_layers=94, d_model=4096, n_heads=64, n_kv_heads=4, head_dim=128, d_ff=12288,
               vocab_size=151936, n_experts=128, experts_per_token=8, expert_d_ff=1536),
    ]  # fmt: skip
    gemma2 = "Gemma 2 report (arXiv 2408.00118) Table 1; google/gemma-2-* config.json"
    gemma_opts = dict(tied_embeddings=True, norms_per_layer=4, sliding_window=4096)
    presets += [
        _llama("gemma2-9b", "Gemma 2 9B", "gemma2", gemma2, 9.24e9,
               n_layers=42, d_model=3584, n_heads=16, n_kv_heads=8, head_dim=256, d_ff=14336,
               vocab_size=256000, n_sliding_window_layers=21, **gemma_opts),
        _llama("gemma2-27b", "Gemma 2 27B", "gemma2", gemma2, 27.2e9,
               n_layers=46, d_model=4608, n_heads=32, n_kv_heads=16, head_dim=128, d_ff=36864,
               vocab_size=256000, n_sliding_window_layers=23, **gemma_opts),
    ]  # fmt: skip
    presets.append(
        _llama(
            "deepseek-v3",
            "DeepSeek-V3",
            "deepseek",
            "DeepSeek-AI 2024 (DeepSeek-V3, arXiv 2412.19437) §2, §4.2; deepseek-ai/DeepSeek-V3 config.json "
            "(671B total, 37B activated; the 14B multi-token-prediction module is not counted)",
            671e9,
            n_layers=61,
            d_model=7168,
            n_heads=128,
            head_dim=192,
            d_ff=18432,
            vocab_size=129280,
            n_experts=256,
            experts_per_token=8,
            expert_d_ff=2048,
            n_shared_experts=1,
            shared_expert_d_ff=2048,
            first_k_dense_layers=3,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
        )
    )
    gpt_like = dict(
        ffn_kind="plain",
        norm_kind="layernorm",
        norm_has_bias=True,
        qkv_bias=True,
        attn_out_bias=True,
        mlp_bias=True,
    )
    presets += [
        _llama("gpt-neox-20b", "GPT-NeoX-20B", "gpt-neox",
               "Black et al. 2022 (arXiv 2204.06745) Table 1; EleutherAI/gpt-neox-20b config.json "
               "(vocab padded to 50432)", 20.55e9,
               n_layers=44, d_model=6144, n_heads=64, d_ff=24576, vocab_size=50432, **gpt_like),
        _llama("opt-175b", "OPT-175B", "opt",
               "Zhang et al. 2022 (arXiv 2205.01068) Table 1; learned positions 2048 + 2 offset rows",
               175e9,
               n_layers=96, d_model=12288, n_heads=96, d_ff=49152, vocab_size=50272, tied_embeddings=True,
               position_embedding="learned", max_position_embeddings=2050, **gpt_like),
        _llama("bloom-176b", "BLOOM 176B", "bloom",
               "BigScience 2022 (arXiv 2211.05100) Table 3; bigscience/bloom config.json", 176.2e9,
               n_layers=70, d_model=14336, n_heads=112, d_ff=57344, vocab_size=250880, tied_embeddings=True,
               position_embedding="alibi", embedding_norm=True, **gpt_like),
    ]  # fmt: skip
    mpt_opts = dict(ffn_kind="plain", tied_embeddings=True, position_embedding="alibi", norm_kind="layernorm")
    presets += [
        _llama("mpt-7b", "MPT-7B", "mpt",
               "MosaicML 2023, MPT-7B model card (6.7B; no biases, ALiBi, tied); mosaicml/mpt-7b config.json "
               "(vocab padded to 50432; llm-foundry's benchmark YAMLs use 50368)",
               6.7e9, n_layers=32, d_model=4096, n_heads=32, vocab_size=50432, **mpt_opts),
        _llama("mpt-30b", "MPT-30B", "mpt",
               "MosaicML 2023, MPT-30B model card; mosaicml/mpt-30b config.json", 29.95e9,
               n_layers=48, d_model=7168, n_heads=64, vocab_size=50432, **mpt_opts),
    ]  # fmt: skip
    presets.append(
        _llama(
            "palm-540b",
            "PaLM 540B",
            "palm",
            "Chowdhery et al. 2022 (arXiv 2204.02311) Table 1 and §2: SwiGLU, parallel layers, "
            "multi-query, no biases, shared input/output embedding; N = 540.35e9 (Appendix B)",
            540.35e9,
            n_layers=118,
            d_model=18432,
            n_heads=48,
            n_kv_heads=1,
            head_dim=256,
            d_ff=73728,
            vocab_size=256000,
            tied_embeddings=True,
            norm_kind="layernorm",
            norms_per_layer=1,
        )
    )
    # Active-parameter figures published beside the totals.
    active = {"mixtral-8x7b": 12.9e9, "mixtral-8x22b": 39e9, "deepseek-v3": 37e9, "qwen3-30b-a3b": 3.3e9,
              "qwen3-235b-a22b": 22e9}  # fmt: skip
    return {
        p.id: dataclasses.replace(p, published_active_parameters=active[p.id]) if p.id in active else p
        for p in presets
    }


PRESETS: dict[str, Preset] = _build_presets()


def get_preset(preset_id: str) -> Preset:
    """The preset with this id (case-insensitive); NotFound with close matches otherwise."""
    key = preset_id.strip().lower() if isinstance(preset_id, str) else ""
    preset = PRESETS.get(key)
    if preset is not None:
        return preset
    close = tuple(difflib.get_close_matches(key, PRESETS, n=5, cutoff=0.5))
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise NotFound(
        f"no model preset {preset_id!r}.{hint} Known presets: {', '.join(PRESETS)}; "
        "or give the model's dimensions or its Hugging Face config.json instead.",
        field="preset",
        close_matches=close,
    )
