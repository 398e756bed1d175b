"""The demo fleet (use case behind ``teff demo``): a small, realistic set of runs and measurements, and
a key to read them, so that every example in the docs answers on a fresh machine.

What is stored is what the API stores: each run's body is a ``POST /v1/runs`` body, each
measurement a ``POST /v1/runs/{id}/measurements`` item, and both go through the API's own
computations (a :class:`RunRecorder` the caller passes: this layer imports no HTTP code) and the
measurement transaction the API commits (:func:`service.usecases.measurements.record_batch`). A final
status is written as ``PATCH /v1/runs/{id}`` writes it (status, finished_at, updated_at).

Loading is idempotent: the runs have fixed ids (:data:`DEMO_RUN_IDS`, for the docs' examples), a run
found by its id is kept as it is, its measurements are generated again from its stored start and
compute facts, and a (run, step) is stored once (first write wins), so a second load stores nothing.
A key, though, is made anew by every load: keys are stored only as hashes, so an earlier one cannot be
shown again (earlier demo keys stay valid until revoked).

Step times are derived from published MFUs (each run cites its row): step time = global batch tokens
× model FLOPs per token ÷ (devices × dense peak × MFU), with the run's own FLOPs per token and peak as
the API stored them, so the efficiency the service answers lands on the published figure. Around it:
small deterministic noise from a seeded RNG, a slower start (compilation, data-loader warm-up) and,
for the failed run, the slow-down before its failure. The loss follows Hoffmann et al. 2022 Eq. 10 in
the tokens seen.
"""

from __future__ import annotations

import dataclasses
import random
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from service.domain.goodput import EventKind
from service.store import keys as keys_store
from service.store import measurements as measurements_store
from service.store import records as records_store
from service.store import runs as runs_store
from service.store.uow import Database, UnitOfWork
from service.usecases import goodput as goodput_usecase
from service.usecases.measurements import Added, MeasurementJob, record_batch

#: Every demo run belongs to this tenant (the printed key's): run ids are unique across tenants.
DEMO_TENANT = "demo"
#: The name the demo keys carry (``teff keys list`` shows it).
DEMO_KEY_NAME = "demo"
#: Read and write: the docs' examples record runs and measurements too. Not admin.
DEMO_KEY_SCOPES = frozenset({"read", "write"})

FinalStatus = Literal["running", "finished", "failed"]

# --------------------------------------------------------------------------------------------------
# Published MFU ranges (fractions of the dense peak) the demo runs are derived from.
# Sources: the published papers and READMEs named below (collected in the validation set,
# validation/published_runs.json, and reference/flops_and_mfu.md).

#: torchtitan, Llama 3.1 8B on H100 at sequence 8192: 5,762 and 6,667 tokens/s per GPU are 33.7 % and
#: 39.0 % MFU (reference/flops_and_mfu.md, reproduction targets).
TORCHTITAN_LLAMA3_8B_MFU = (0.337, 0.390)
#: MosaicML llm-foundry benchmarking README on H100 SXM (validation rows mpt-*-h100-sxm-*): 36.65 %
#: (MPT-1B, 512 GPUs) to 46.44 % (MPT-7B, 8 GPUs: 10,643 tokens/s per GPU).
MOSAICML_H100_MFU = (0.3665, 0.4644)
#: Megatron-LM README model table, H100 weak scaling 2024 (validation rows megatron-h100-2024-*): 41 %
#: (1.7B) to 49 % (16B).
MEGATRON_H100_MFU = (0.41, 0.49)
#: Narayanan et al. 2021 Table 1 on A100 (validation rows narayanan2021-t1-*) report 43-52 % of peak
#: with full recomputation counted (HFU). Full recomputation adds one forward to forward + backward
#: (3 → 4 forward passes of matmul work: reference/flops_and_mfu.md), so their MFU is 3/4 of that.
NARAYANAN_A100_MFU = (0.43 * 3 / 4, 0.52 * 3 / 4)

# --------------------------------------------------------------------------------------------------
# The loss: Hoffmann et al. 2022 Eq. 10, L(N, D) = E + A/N^α + B/D^β, with the paper's rounded
# constants (reference/batch_and_scaling.md). N: the run's total parameters; D: tokens seen so far.
CHINCHILLA_E = 1.69
CHINCHILLA_A = 406.4
CHINCHILLA_B = 410.7
CHINCHILLA_ALPHA = 0.34
CHINCHILLA_BETA = 0.28

#: Relative spread (one standard deviation) of a measured step's MFU around the run's figure: step-to-
#: step jitter of a healthy job is about a percent (data-loader and collective timing).
MFU_NOISE_RELATIVE = 0.008
#: Relative spread of a reported loss around the fitted curve (one batch's loss is a noisy estimate).
LOSS_NOISE_RELATIVE = 0.004
#: The first measurements run slower: compilation, allocator and data-loader warm-up. Fractions of the
#: run's MFU, in order.
WARMUP_MFU_FRACTIONS = (0.62, 0.86, 0.95)
#: Seconds from a job's start to its first step (container start, model load, compilation).
STARTUP_SECONDS = 240.0
#: A failed run slows down over its last measurements before it dies (a degrading node) down to this
#: fraction of its MFU.
FAILING_MFU_FRACTION = 0.55
#: Seconds between a failed run's last measurement and its failure being recorded (a hang until the
#: collective timeout).
FAILURE_AFTER_SECONDS = 600.0
#: Seconds between a finished run's last measurement and its finish.
FINISH_AFTER_SECONDS = 90.0
#: A checkpoint is saved every this many measurements and takes CHECKPOINT_SAVE_SECONDS (sharded state
#: of tens to hundreds of GB written in parallel to a parallel file system: about a minute; one figure
#: for every demo run).
CHECKPOINT_EVERY_MEASUREMENTS = 50
CHECKPOINT_SAVE_SECONDS = 40.0
#: A restarted attempt reads the last checkpoint during its start-up, from this many seconds after its
#: start, for CHECKPOINT_RESTORE_SECONDS.
CHECKPOINT_RESTORE_FROM_SECONDS = 120.0
CHECKPOINT_RESTORE_SECONDS = 90.0
#: What the failed run's failure event says (its hang lasts FAILURE_AFTER_SECONDS, the watchdog's limit).
FAILURE_REASON = f"NCCL watchdog: an all-gather did not complete within {FAILURE_AFTER_SECONDS:.0f} s (node demo-h100-b-017)"


@dataclass(frozen=True, slots=True)
class DemoRun:
    """One demo run: its ``POST /v1/runs`` body (without ``started_at``: the load sets it), where its
    measurements end relative to the first load, and the published MFU its step times come from."""

    id: str
    body: dict[str, Any]
    status: FinalStatus
    #: The run's MFU (fraction of the dense peak) before noise, and the published range it lies in.
    mfu: float
    mfu_range: tuple[float, float]
    source: str
    measurements: int
    steps_between_measurements: int
    #: Its last measurement is this long before the first load's moment (running runs: minutes).
    ends_hours_ago: float
    #: Measurements at the end that slow down towards FAILING_MFU_FRACTION (failed runs).
    failing_measurements: int = 0
    #: A restarted attempt continues from its predecessor's last checkpoint: its steps count on from it.
    resumes_from_step: int = 0


def _run(
    id: str,
    on: tuple[str, str, int],
    *,
    batch: tuple[int, int],
    layout: dict[str, int],
    job: tuple[str, str, str, int],
    tags: list[str],
    budget: tuple[int, float],
    measured: tuple[int, int],
    **facts: Any,
) -> DemoRun:
    """``on``: (preset, accelerator, devices); ``batch``: (sequence length, global batch tokens);
    ``job``: (framework, cluster, scheduler job id, attempt); ``budget``: (token budget, price per
    device-hour); ``measured``: (measurements, steps between them)."""
    (preset, accelerator, count), (seq_len, batch_tokens) = on, batch
    framework, cluster, job_id, attempt = job
    body: dict[str, Any] = {
        "model": {"preset": preset},
        "hardware": {"accelerator": accelerator, "device_count": count},
        "precision": "bf16",
        "seq_len_tokens": seq_len,
        "global_batch_tokens": batch_tokens,
        "parallelism": layout,
        "framework": framework,
        "cluster": cluster,
        "scheduler_job_id": job_id,
        "attempt": attempt,
        "tags": ["demo", *tags],
        "token_budget_tokens": budget[0],
        "price_per_device_hour": budget[1],
    }
    return DemoRun(
        id=id, body=body, measurements=measured[0], steps_between_measurements=measured[1], **facts
    )


# Prices per device-hour are the caller's; the demo uses round figures of cloud list prices.
_H100_PRICE = 2.5
_A100_PRICE = 1.4


def _fsdp(dp: int, micro_batch: int) -> dict[str, int]:
    """Data parallel over every device with fully sharded parameters (FSDP full shard = ZeRO-3)."""
    return {"tp": 1, "pp": 1, "dp": dp, "micro_batch_sequences": micro_batch, "zero_stage": 3}


_TORCHTITAN_39 = "torchtitan Llama 3.1 8B, 8 × H100, seq 8192: 6,667 tokens/s per GPU = 39.0 % MFU"
_TORCHTITAN_34 = "torchtitan Llama 3.1 8B, H100, seq 8192: 5,762 tokens/s per GPU = 33.7 % MFU"

#: The fleet. Five runs share the H100 1-10B group, so the fleet statistics show its percentiles
#: (a group needs 5 runs); the first two ids are the ones the compare example in the docs names.
DEMO_RUNS: tuple[DemoRun, ...] = (
    _run(
        "run_5f0c2a9b1d3e4f6a7b8c",
        ("llama3-8b", "h100-sxm", 8),
        batch=(8192, 1_048_576),
        layout=_fsdp(8, 2),
        job=("torchtitan 0.1", "demo-h100-a", "slurm-4100001", 0),
        tags=["pretrain", "llama3"],
        budget=(15_000_000_000, _H100_PRICE),
        status="running",
        mfu=TORCHTITAN_LLAMA3_8B_MFU[1] - 0.004,  # torchtitan's 39.0 %, less the jitter's reach
        mfu_range=TORCHTITAN_LLAMA3_8B_MFU,
        source=_TORCHTITAN_39,
        measured=(300, 10),
        ends_hours_ago=0.05,
    ),
    _run(
        "run_9e8d7c6b5a4f3e2d1c0b",
        ("mpt-7b", "h100-sxm", 8),
        batch=(2048, 1_048_576),
        layout=_fsdp(8, 8),
        job=("llm-foundry 0.10", "demo-h100-a", "slurm-4099876", 0),
        tags=["pretrain", "mpt"],
        budget=(4_194_304_000, _H100_PRICE),
        status="finished",
        mfu=0.4644,
        mfu_range=MOSAICML_H100_MFU,
        source="MosaicML llm-foundry: MPT-7B, 8 × H100 SXM, seq 2048: 10,643 tokens/s per GPU = 46.44 % MFU",
        measured=(400, 10),
        ends_hours_ago=30.0,
    ),
    _run(
        "run_d40ed047c2f68d7f865a",
        ("llama3-8b", "h100-sxm", 64),
        batch=(8192, 4_194_304),
        layout=_fsdp(64, 1),
        job=("torchtitan 0.1", "demo-h100-b", "slurm-4100217", 0),
        tags=["pretrain", "llama3"],
        budget=(100_000_000_000, _H100_PRICE),
        status="failed",
        mfu=TORCHTITAN_LLAMA3_8B_MFU[0] + 0.004,  # torchtitan's 33.7 %, plus the jitter's reach
        mfu_range=TORCHTITAN_LLAMA3_8B_MFU,
        source=_TORCHTITAN_34,
        # Saves every 50 measurements: the last (step 1500) is 40 before the failure, what the restart loses.
        measured=(190, 10),
        ends_hours_ago=12.0,
        failing_measurements=12,
    ),
    _run(
        "run_953d6f21f0f0a089d627",
        ("llama3-8b", "h100-sxm", 64),
        batch=(8192, 4_194_304),
        layout=_fsdp(64, 1),
        job=("torchtitan 0.1", "demo-h100-b", "slurm-4100217", 1),
        tags=["pretrain", "llama3", "restart"],
        budget=(100_000_000_000, _H100_PRICE),
        status="running",
        mfu=TORCHTITAN_LLAMA3_8B_MFU[0] + 0.004,
        mfu_range=TORCHTITAN_LLAMA3_8B_MFU,
        source=_TORCHTITAN_34,
        measured=(300, 10),
        ends_hours_ago=0.1,
        resumes_from_step=1500,  # attempt 0's last checkpoint
    ),
    _run(
        "run_cc580ae4b7c32aa3d4bc",
        ("mpt-7b", "h100-sxm", 512),
        batch=(2048, 4_194_304),
        layout=_fsdp(512, 4),
        job=("llm-foundry 0.10", "demo-h100-c", "slurm-3988012", 0),
        tags=["pretrain", "mpt", "scaling"],
        budget=(12_582_912_000, _H100_PRICE),
        status="finished",
        mfu=0.422,
        mfu_range=MOSAICML_H100_MFU,
        source="MosaicML llm-foundry: MPT-7B, 512 × H100 SXM, seq 2048: 9,670 tokens/s per GPU = 42.2 % MFU",
        measured=(300, 10),
        ends_hours_ago=72.0,
    ),
    _run(
        "run_ad2187caebdc4a48a4c0",
        ("mixtral-8x7b", "h100-sxm", 64),
        batch=(4096, 4_194_304),
        layout={"tp": 2, "pp": 1, "dp": 32, "micro_batch_sequences": 1, "zero_stage": 1},
        job=("megatron-lm 0.9", "demo-h100-b", "slurm-4100302", 0),
        tags=["pretrain", "moe"],
        budget=(200_000_000_000, _H100_PRICE),
        status="running",
        # No MoE row is published in validation/: the Megatron-LM 2024 H100 table's 70B figure (42 %),
        # near its lowest dense one, since routing and the experts' all-to-all only cost more.
        mfu=0.42,
        mfu_range=MEGATRON_H100_MFU,
        source="Megatron-LM README H100 table (2024): 70B on 768 × H100 = 42 % MFU (dense)",
        measured=(300, 10),
        ends_hours_ago=0.02,
    ),
    _run(
        "run_5a75bdb4f98b8563578e",
        ("llama2-70b", "a100-sxm4-80gb", 64),
        batch=(4096, 4_194_304),
        layout=_fsdp(64, 1),
        job=("pytorch-fsdp 2.4", "demo-a100", "slurm-2077451", 0),
        tags=["continued-pretrain", "llama2", "fsdp"],
        budget=(1_258_291_200, _A100_PRICE),
        status="finished",
        mfu=0.45 * 3 / 4,  # Narayanan et al. 2021 Table 1, 76B: 45 % with full recomputation
        mfu_range=NARAYANAN_A100_MFU,
        source="Narayanan et al. 2021 Table 1, 76B on 1024 × A100: 45 % with full recomputation = 33.75 % MFU",
        measured=(300, 1),
        ends_hours_ago=120.0,
    ),
    _run(
        "run_54b6058b4a3ac997ebbb",
        ("gpt3-1.3b", "a100-sxm4-80gb", 8),
        batch=(2048, 1_048_576),  # GPT-3 Table 2.1: the 1.3B model trained with 1M-token batches
        layout={"tp": 1, "pp": 1, "dp": 8, "micro_batch_sequences": 16, "zero_stage": 1},
        job=("megatron-lm 0.9", "demo-a100", "slurm-2079930", 0),
        tags=["pretrain", "gpt3"],
        budget=(26_000_000_000, _A100_PRICE),
        status="finished",
        mfu=0.44 * 3 / 4,  # Narayanan et al. 2021 Table 1, 1.7B: 44 % with full recomputation
        mfu_range=NARAYANAN_A100_MFU,
        source="Narayanan et al. 2021 Table 1, 1.7B on 32 × A100: 44 % with full recomputation = 33 % MFU",
        measured=(300, 10),
        ends_hours_ago=200.0,
    ),
)

#: The demo runs' ids by a readable name (what the docs' examples use).
DEMO_RUN_IDS: dict[str, str] = {
    "llama3_8b_h100x8": DEMO_RUNS[0].id,
    "mpt_7b_h100x8": DEMO_RUNS[1].id,
    "llama3_8b_h100x64_failed": DEMO_RUNS[2].id,
    "llama3_8b_h100x64_restart": DEMO_RUNS[3].id,
    "mpt_7b_h100x512": DEMO_RUNS[4].id,
    "mixtral_8x7b_h100x64": DEMO_RUNS[5].id,
    "llama2_70b_a100x64": DEMO_RUNS[6].id,
    "gpt3_1_3b_a100x8": DEMO_RUNS[7].id,
}


class RunRecorder(Protocol):
    """The API's own computations for a run's body and a measurement body (the caller passes the
    API's: ``service.api.run_request.prepare_run``, and ``service.api.measurement_request`` with
    ``service.usecases.ingest.measurement_values``)."""

    def prepare_run(
        self, body: Mapping[str, Any], *, now: datetime
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The runs columns and tags ``POST /v1/runs`` stores for ``body``."""
        ...

    def measurement_values(
        self, run: records_store.RunRecord, items: Sequence[Mapping[str, Any]], *, now: datetime
    ) -> list[tuple[Any, ...]]:
        """The measurement value tuples ``POST /v1/runs/{id}/measurements`` stores for ``items``."""
        ...


# --------------------------------------------------------------------------------------------------
# Measurements


def chinchilla_loss(parameters: float, tokens: float) -> float:
    """Hoffmann et al. 2022 Eq. 10 with its rounded constants, in nats per token."""
    return (
        CHINCHILLA_E
        + CHINCHILLA_A / parameters**CHINCHILLA_ALPHA
        + CHINCHILLA_B / max(tokens, 1.0) ** CHINCHILLA_BETA
    )


def _mfu_profile(demo: DemoRun, rng: random.Random) -> list[float]:
    """Each measurement's MFU: warm-up, jitter, and a failing run's slow-down."""
    values = []
    failing_from = demo.measurements - demo.failing_measurements
    for index in range(demo.measurements):
        factor = WARMUP_MFU_FRACTIONS[index] if index < len(WARMUP_MFU_FRACTIONS) else 1.0
        if index >= failing_from:
            progress = (index - failing_from + 1) / demo.failing_measurements
            factor *= 1.0 - (1.0 - FAILING_MFU_FRACTION) * progress
        values.append(demo.mfu * factor * (1.0 + rng.gauss(0.0, MFU_NOISE_RELATIVE)))
    return values


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _seed(demo: DemoRun) -> int:
    return zlib.crc32(demo.id.encode())


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What a demo run's measurements are computed from: as the API stored them."""

    model_flops_per_token: float
    peak_tflops_per_device: float
    device_count: int
    global_batch_tokens: int
    parameters_total: int


def _step_times(demo: DemoRun, facts: RunFacts) -> list[float]:
    """Seconds per step at each measurement: batch × FLOPs per token ÷ (devices × peak × MFU), in
    milliseconds as a trainer's timer reports them."""
    flops_per_step = facts.global_batch_tokens * facts.model_flops_per_token
    peak_flops = facts.device_count * facts.peak_tflops_per_device * 1e12
    return [
        round(flops_per_step / (peak_flops * mfu), 3)
        for mfu in _mfu_profile(demo, random.Random(_seed(demo)))
    ]


def duration_seconds(demo: DemoRun, facts: RunFacts) -> float:
    """From the job's start to its last measurement."""
    return STARTUP_SECONDS + demo.steps_between_measurements * sum(_step_times(demo, facts))


def demo_measurements(demo: DemoRun, facts: RunFacts, *, started_at: datetime) -> list[dict[str, Any]]:
    """The run's measurement body: a function of its start and compute facts only, so a second load
    sends the same steps (and stores none of them again)."""
    loss_rng = random.Random(_seed(demo) + 1)
    items = []
    elapsed = STARTUP_SECONDS
    every = demo.steps_between_measurements
    for index, step_time in enumerate(_step_times(demo, facts)):
        step = demo.resumes_from_step + (index + 1) * every
        elapsed += every * step_time
        loss = chinchilla_loss(facts.parameters_total, step * facts.global_batch_tokens)
        items.append(
            {
                "step": step,
                "time": _iso(started_at + timedelta(seconds=round(elapsed, 3))),
                "throughput": {
                    "step_time_seconds": step_time,
                    "global_batch_tokens": facts.global_batch_tokens,
                },
                "loss": round(loss * (1.0 + loss_rng.gauss(0.0, LOSS_NOISE_RELATIVE)), 4),
            }
        )
    return items


# --------------------------------------------------------------------------------------------------
# Loading


def demo_events(
    demo: DemoRun, *, started_at: datetime, items: Sequence[Mapping[str, Any]], finished_at: datetime | None
) -> list[goodput_usecase.EventInput]:
    """The run's goodput events (``POST /v1/runs/{id}/events``): start, a restart's restore, first
    step, checkpoint saves, and the end (job_ended, or a hang and the failure). Fixed ids: idempotent."""
    event, kind, after = goodput_usecase.EventInput, EventKind, timedelta
    events = [event("demo-job-started", kind.JOB_STARTED, started_at)]
    if demo.body["attempt"]:
        restore = started_at + after(seconds=CHECKPOINT_RESTORE_FROM_SECONDS)
        events.append(event("demo-restore-begin", kind.CHECKPOINT_RESTORE_BEGIN, restore))
        end = restore + after(seconds=CHECKPOINT_RESTORE_SECONDS)
        events.append(event("demo-restore-end", kind.CHECKPOINT_RESTORE_END, end))
    events.append(event("demo-first-step", kind.FIRST_STEP, started_at + after(seconds=STARTUP_SECONDS)))
    for item in items[CHECKPOINT_EVERY_MEASUREMENTS - 1 :: CHECKPOINT_EVERY_MEASUREMENTS]:
        step, begin = item["step"], datetime.fromisoformat(item["time"])
        events.append(event(f"demo-save-{step}-begin", kind.CHECKPOINT_SAVE_BEGIN, begin, step=step))
        end = begin + after(seconds=CHECKPOINT_SAVE_SECONDS)
        events.append(event(f"demo-save-{step}-end", kind.CHECKPOINT_SAVE_END, end, step=step))
    if finished_at is not None and demo.status == "failed":
        events.append(
            event("demo-hang", kind.HANG_DETECTED, finished_at, duration_seconds=FAILURE_AFTER_SECONDS)
        )
        events.append(event("demo-failure", kind.FAILURE, finished_at, reason=FAILURE_REASON))
    elif finished_at is not None:
        events.append(event("demo-job-ended", kind.JOB_ENDED, finished_at))
    return [dataclasses.replace(each, attempt=demo.body["attempt"]) for each in events]


@dataclass(frozen=True, slots=True)
class LoadedRun:
    demo: DemoRun
    title: str  # "llama3-8b on 8 × NVIDIA H100 SXM5 80GB"
    created: bool  # False: it was there already, kept as it was
    stored: int  # measurements stored by this load
    ignored: int  # measurements it had already
    events_stored: int
    status: str
    median_mfu: float | None


@dataclass(frozen=True, slots=True)
class DemoLoaded:
    key: str
    earlier_keys: int  # active demo keys made by earlier loads (still valid)
    runs: list[LoadedRun] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def measurements_stored(self) -> int:
        return sum(run.stored for run in self.runs)

    @property
    def events_stored(self) -> int:
        return sum(run.events_stored for run in self.runs)


def create_demo_key(database: Database) -> tuple[str, int, int]:
    """A fresh demo key: (the key, its id, how many earlier demo keys are still active)."""
    with UnitOfWork(database, write=True) as uow:
        earlier = sum(
            1
            for record in keys_store.list_keys(uow.connection, tenant=DEMO_TENANT)
            if record.name == DEMO_KEY_NAME and record.revoked_at is None
        )
        key = keys_store.create_key(
            uow.connection, tenant=DEMO_TENANT, scopes=DEMO_KEY_SCOPES, name=DEMO_KEY_NAME
        )
        principal = keys_store.authenticate(uow.connection, key)
        assert principal is not None
        uow.commit()
    return key, principal.key_id, earlier


def run_facts(values: Mapping[str, Any] | records_store.RunRecord) -> RunFacts:
    """The facts of a run's columns (as prepared) or of its record (as stored)."""
    if isinstance(values, records_store.RunRecord):
        values = {name: getattr(values, name) for name in RunFacts.__dataclass_fields__}
    return RunFacts(**{name: values[name] for name in RunFacts.__dataclass_fields__})


def _create(
    uow: UnitOfWork, demo: DemoRun, recorder: RunRecorder, *, anchor: datetime
) -> records_store.RunRecord:
    """The run as POST /v1/runs stores it, started so that its last measurement falls
    ``ends_hours_ago`` before ``anchor``, under its fixed id."""
    now = datetime.now(UTC)
    values, _ = recorder.prepare_run(demo.body, now=now)  # its compute facts, to time the job
    ends = anchor - timedelta(hours=demo.ends_hours_ago)
    started_at = (ends - timedelta(seconds=duration_seconds(demo, run_facts(values)))).replace(microsecond=0)
    body = {**demo.body, "started_at": _iso(started_at)}
    values, tags = recorder.prepare_run(body, now=now)
    connection = uow.connection
    made = runs_store.create_run(connection, tenant=DEMO_TENANT, values=values, tags=tags)
    # The store draws a random id; the demo's are fixed (the docs' examples name them). Renamed in the
    # transaction that created it, the random one is never seen.
    runs_store.update_run(connection, run_pk=made.pk, values={"id": demo.id})
    run = runs_store.get_run(connection, tenant=DEMO_TENANT, run_id=demo.id)
    assert run is not None
    return run


def _load_run(
    database: Database, demo: DemoRun, recorder: RunRecorder, *, key_id: int, anchor: datetime
) -> LoadedRun:
    with UnitOfWork(database, write=True) as uow:
        connection = uow.connection
        run = runs_store.get_run(connection, tenant=DEMO_TENANT, run_id=demo.id, for_update=True)
        created = run is None
        if run is None:
            run = _create(uow, demo, recorder, anchor=anchor)
        started_at = run.started_at.astimezone(UTC)
        items = demo_measurements(demo, run_facts(run), started_at=started_at)
        now = datetime.now(UTC)
        values = recorder.measurement_values(run, items, now=now)
        job = MeasurementJob(
            key_id=key_id,
            tenant=DEMO_TENANT,
            run_id=demo.id,
            run=run,
            values=values,
            parameters=measurements_store.measurement_parameters(database.dialect, values),
        )
        (outcome,) = record_batch(connection, [job])
        if not isinstance(outcome, Added):
            raise outcome
        after = outcome.run
        status, finished_at = after.status, after.finished_at
        if demo.status != "running" and status == "running":
            wait = FAILURE_AFTER_SECONDS if demo.status == "failed" else FINISH_AFTER_SECONDS
            status, finished_at = (
                demo.status,
                datetime.fromisoformat(items[-1]["time"]) + timedelta(seconds=wait),
            )
            # As PATCH /v1/runs/{id} writes a final status with its finished_at.
            runs_store.update_run(
                connection,
                run_pk=after.pk,
                values={"status": status, "finished_at": finished_at, "updated_at": now},
            )
        uow.commit()
    events = demo_events(demo, started_at=started_at, items=items, finished_at=finished_at)
    with UnitOfWork(database, write=True) as uow:
        recorded = goodput_usecase.record_events(uow, tenant=DEMO_TENANT, run_id=demo.id, events=events)
    return LoadedRun(
        demo=demo,
        title=f"{after.model_name} on {after.device_count} × {after.accelerator_name}",
        created=created,
        stored=outcome.stored,
        ignored=len(outcome.ignored_steps),
        events_stored=recorded.stored,
        status=status,
        median_mfu=after.median_mfu,
    )


def load_demo(database: Database, *, recorder: RunRecorder, now: datetime | None = None) -> DemoLoaded:
    """Make a demo key and load the fleet (creating only the runs and steps it lacks)."""
    began = time.perf_counter()
    anchor = (now or datetime.now(UTC)).replace(second=0, microsecond=0)
    key, key_id, earlier = create_demo_key(database)
    runs = [_load_run(database, demo, recorder, key_id=key_id, anchor=anchor) for demo in DEMO_RUNS]
    return DemoLoaded(key=key, earlier_keys=earlier, runs=runs, seconds=time.perf_counter() - began)
