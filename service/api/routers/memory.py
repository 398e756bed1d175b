"""Memory per device for a model, layout and micro-batch."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.json_body import StrictJsonRoute
from service.api.presenters.memory import domain_layout, in_request, memory_read, resolve_device
from service.api.resolve import resolve_model
from service.api.schemas.memory import MemoryRead, MemoryRequest
from service.domain import memory as mem

router = APIRouter(tags=["memory"], route_class=StrictJsonRoute)


@router.post(
    "/memory",
    summary="Memory per device: weights, gradients, optimizer state, activations, buffers; fits or not",
)
async def estimate_memory(body: MemoryRequest) -> MemoryRead:
    """Bytes per device on the worst pipeline stage (`stage`: only, first or last) for a model, a layout
    (tp, pp with virtual_stages, dp, cp, ep, micro-batch, sequence parallel, ZeRO/FSDP stage, distributed
    optimizer, recomputation, FlashAttention) and an optimizer.

    Model states are bytes per parameter (echoed in `optimizer`) split by tp·pp, then sharded over dp·cp
    by the ZeRO stage; activations follow Korthikanti et al. 2022 Table 2 (generalised for GQA, SwiGLU and
    MoE), with 1F1B's in-flight micro-batches on the first stage; framework overhead and allocator
    fragmentation are stated constants (`assumptions`). With `hardware` the answer says whether it fits,
    the headroom and the largest micro-batch that fits.
    """
    spec = resolve_model(body.model)
    layout = domain_layout(body.layout)
    accelerator = None
    if body.hardware is not None:
        accelerator = resolve_device(body.hardware.accelerator, body.hardware.custom, field="body.hardware")
    estimate = in_request(
        lambda: mem.estimate_memory(
            spec,
            body.seq_len_tokens,
            layout,
            precision=body.precision,
            optimizer=body.optimizer,
            accelerator=accelerator,
            global_batch_sequences=body.global_batch_sequences,
            dropout=body.dropout,
        )
    )
    return memory_read(estimate, spec=spec, body=body, layout=layout, accelerator=accelerator)
