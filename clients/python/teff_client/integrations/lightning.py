"""Lightning callback.

    trainer = L.Trainer(callbacks=[EfficiencyCallback(hardware="h100-sxm")])

The run is described at the first training batch, when the batch's shape gives the sequence length
and the micro-batch (× accumulation × world size = the global batch); the model from ``hf_config``
of the LightningModule (or its ``.model``), or ``model_ref=``. Every ``report_every_n_steps``
optimizer steps the mean step time is reported and the MFU the service answered is logged with
``pl_module.log("teff_mfu", ...)``. Finished at ``on_fit_end``, failed on ``on_exception``.

Goodput events (:class:`~teff_client.integrations._common.JobTimeline`): job start (when the
callback was built) and, for a scheduler retry, the attempt; start-up done and the first step. A
checkpoint save runs from ``on_save_checkpoint`` (Lightning calls it as it assembles the checkpoint,
before writing it) to the next training batch's start (or the fit's end); a restore from
``on_load_checkpoint`` (the file is read, the states not yet restored) to the first training batch's
start; an evaluation from ``on_validation_start`` to ``on_validation_end``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl

from teff_client import Client
from teff_client.integrations._common import (
    JobTimeline,
    StepWindow,
    client_from,
    hardware_ref,
    hf_config_of,
    run_description,
)
from teff_client.reporter import Reporter

_PRECISION = {"bf16": "bf16", "16": "fp16", "32": "fp32", "64": "fp64", "transformer-engine": "fp8"}


def _precision(trainer: Any) -> str:
    name = str(getattr(trainer, "precision", "32-true"))
    return _PRECISION.get(name.split("-")[0], "fp32")


def _batch_shape(batch: Any) -> tuple[int, int] | None:
    """(sequences, tokens per sequence) of a batch: a tensor, or the ``input_ids`` of a mapping, or the
    first tensor of a tuple."""
    if isinstance(batch, Mapping):
        batch = batch.get("input_ids", next(iter(batch.values()), None))
    elif isinstance(batch, list | tuple) and batch:
        batch = batch[0]
    shape = getattr(batch, "shape", None)
    if shape is None or len(shape) < 2:
        return None
    return int(shape[0]), int(shape[1])


class EfficiencyCallback(pl.Callback):
    def __init__(
        self,
        *,
        hardware: Mapping[str, Any] | str | None = None,
        model_ref: Mapping[str, Any] | None = None,
        seq_len_tokens: int | None = None,
        global_batch_sequences: int | None = None,
        precision: str | None = None,
        report_every_n_steps: int = 10,
        client: Client | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        tags: list[str] | None = None,
        run_overrides: Mapping[str, Any] | None = None,
        reporter_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.hardware = hardware
        self.model_ref = model_ref
        self.seq_len_tokens = seq_len_tokens
        self.global_batch_sequences = global_batch_sequences
        self.precision = precision
        self.report_every_n_steps = report_every_n_steps
        self._client_args = (client, base_url, api_key)
        self.tags = tags
        self.run_overrides = run_overrides
        self.reporter_options = dict(reporter_options or {})
        self.reporter: Reporter | None = None
        self.run: dict[str, Any] | None = None
        self._window: StepWindow | None = None
        self._last_step = -1
        self._ended = False
        self.timeline = JobTimeline()
        self._restore_began_at: float | None = None

    @property
    def run_id(self) -> str | None:
        return self.reporter.run_id if self.reporter else None

    def _describe(self, trainer: Any, pl_module: Any, batch: Any) -> None:
        import lightning

        model_ref = self.model_ref
        if model_ref is None:
            config = hf_config_of(pl_module) or hf_config_of(getattr(pl_module, "model", None))
            if config is None:
                raise ValueError("the LightningModule has no Hugging Face config: pass model_ref=")
            model_ref = {"hf_config": config}
        shape = _batch_shape(batch)
        seq_len = self.seq_len_tokens or (shape[1] if shape else None)
        if seq_len is None:
            raise ValueError("cannot read the sequence length from the batch: pass seq_len_tokens=")
        world = int(trainer.world_size)
        sequences = self.global_batch_sequences
        if sequences is None:
            if shape is None:
                raise ValueError("cannot read the batch size from the batch: pass global_batch_sequences=")
            sequences = shape[0] * int(trainer.accumulate_grad_batches) * world
        self.run = run_description(
            model=model_ref,
            hardware=hardware_ref(self.hardware, world),
            precision=self.precision or _precision(trainer),
            seq_len_tokens=seq_len,
            global_batch_sequences=sequences,
            framework=f"lightning {lightning.__version__}",
            tags=self.tags,
            overrides=self.run_overrides,
        )
        client = client_from(*self._client_args)
        self.reporter = client.reporter(run=self.run, **self.reporter_options)
        self._window = StepWindow(self.reporter, self.report_every_n_steps)
        step = int(trainer.global_step)
        self.timeline.started(self.reporter, attempt=self.run.get("attempt"), step=step)
        if self._restore_began_at is not None:
            self.timeline.begin("checkpoint_restore", step, at=self._restore_began_at)

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self._restore_began_at = time.time()  # the reporter starts with the first batch

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        if trainer.is_global_zero:
            self.timeline.begin("checkpoint_save", int(trainer.global_step))

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.is_global_zero and not trainer.sanity_checking:
            self.timeline.begin("evaluation", int(trainer.global_step))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.is_global_zero:
            self.timeline.end("evaluation", int(trainer.global_step))

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if not trainer.is_global_zero:
            return
        if self.reporter is None:
            self._describe(trainer, pl_module, batch)
        assert self._window is not None
        step = int(trainer.global_step)
        self.timeline.end("checkpoint_restore", step)
        self.timeline.end("checkpoint_save", step)
        self._window.start()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._window is None or not trainer.is_global_zero:
            return
        step = int(trainer.global_step)
        if step == self._last_step:
            return  # a micro-batch inside gradient accumulation: no optimizer step yet
        self._last_step = step
        self.timeline.step_done(step)
        if self._window.step_done(step) is not None and self.reporter is not None:
            mfu = self.reporter.stats.latest_mfu
            if mfu is not None:
                pl_module.log("teff_mfu", float(mfu), on_step=True, prog_bar=True, rank_zero_only=True)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self.timeline.end("checkpoint_save", int(trainer.global_step))
        self.finish("finished")

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.finish("failed", reason=f"{type(exception).__name__}: {exception}")

    def finish(self, status: str, *, reason: str | None = None) -> None:
        """Mark the run ``status``, ending the job's timeline (``job_ended``, or ``failure``)."""
        if self.reporter is not None and not self._ended:
            self._ended = True
            self.reporter.end(status, reason=reason)
