"""Hugging Face Trainer callback.

    trainer = Trainer(..., callbacks=[EfficiencyCallback(seq_len_tokens=2048)])

On ``on_train_begin`` it describes the run from the model's config (``hf_config``), the CUDA device
(``hardware=`` on CPU), the world size, the precision flags (bf16 / fp16 / tf32), the global batch
(per-device batch × accumulation × world size) and the scheduler's environment; the reporter's
thread creates or resumes it. Every ``report_every_n_steps`` optimizer steps it reports the mean step
time; the MFU the service answers is added to the Trainer's logs as ``teff_mfu``. The run is marked
finished at ``on_train_end``, failed when the process exits without reaching it.

Goodput events (:class:`~teff_client.integrations._common.JobTimeline`): job start (when the
callback was built) and, for a scheduler retry, the attempt; start-up done at ``on_train_begin``;
the first step. A checkpoint save runs from the end of the step whose ``control.should_save`` the
Trainer set (the save follows that step) to ``on_save`` (called once the checkpoint is written); an
evaluation likewise from ``control.should_evaluate`` to ``on_evaluate``. A resumed run
(``resume_from_checkpoint``: the Trainer has loaded the checkpoint's state, so ``global_step`` > 0 at
``on_train_begin``) counts a checkpoint restore from ``on_train_begin`` to its first step's start:
the part of a restore the Trainer does after the callbacks can see it (restoring the optimizer and
RNG states and skipping the batches already seen); loading the weights before it is in start-up.
"""

from __future__ import annotations

import atexit
from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback

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


def _precision(args: Any) -> str:
    if getattr(args, "bf16", False):
        return "bf16"
    if getattr(args, "fp16", False):
        return "fp16"
    if getattr(args, "tf32", False):
        return "tf32"
    return "fp32"


class EfficiencyCallback(TrainerCallback):
    def __init__(
        self,
        *,
        seq_len_tokens: int | None = None,
        hardware: Mapping[str, Any] | str | None = None,
        model_ref: Mapping[str, Any] | None = None,
        precision: str | None = None,
        report_every_n_steps: int = 10,
        client: Client | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        tags: list[str] | None = None,
        run_overrides: Mapping[str, Any] | None = None,
        reporter_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.seq_len_tokens = seq_len_tokens
        self.hardware = hardware
        self.model_ref = model_ref
        self.precision = precision
        self.report_every_n_steps = report_every_n_steps
        self._client_args = (client, base_url, api_key)
        self.tags = tags
        self.run_overrides = run_overrides
        self.reporter_options = dict(reporter_options or {})
        self.reporter: Reporter | None = None
        self.run: dict[str, Any] | None = None
        self._window: StepWindow | None = None
        self._ended = False
        self.timeline = JobTimeline()

    @property
    def run_id(self) -> str | None:
        return self.reporter.run_id if self.reporter else None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or self.reporter is not None:
            return
        import transformers

        model_ref = self.model_ref or {"hf_config": hf_config_of(model)}
        if model_ref.get("hf_config", True) is None:
            raise ValueError("the model has no Hugging Face config: pass model_ref=")
        seq_len = self.seq_len_tokens or _config_context(model)
        world = int(getattr(args, "world_size", 1) or 1)
        sequences = args.per_device_train_batch_size * args.gradient_accumulation_steps * world
        self.run = run_description(
            model=model_ref,
            hardware=hardware_ref(self.hardware, world),
            precision=self.precision or _precision(args),
            seq_len_tokens=seq_len,
            global_batch_sequences=sequences,
            framework=f"transformers {transformers.__version__}",
            tags=self.tags,
            overrides=self.run_overrides,
        )
        client = client_from(*self._client_args)
        self.reporter = client.reporter(run=self.run, **self.reporter_options)
        self._window = StepWindow(self.reporter, self.report_every_n_steps)
        atexit.register(self._exit_without_end)
        self.timeline.started(self.reporter, attempt=self.run.get("attempt"), step=state.global_step)
        if state.global_step > 0:
            self.timeline.begin("checkpoint_restore", state.global_step)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._window is not None:
            self.timeline.end("checkpoint_restore", state.global_step)
            self._window.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._window is None:
            return
        self._window.step_done(state.global_step)
        self.timeline.step_done(state.global_step)
        # The DefaultFlowCallback (first in the Trainer's list) has decided what follows this step.
        if getattr(control, "should_evaluate", False):
            self.timeline.begin("evaluation", state.global_step)
        if getattr(control, "should_save", False):
            self.timeline.begin("checkpoint_save", state.global_step)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.timeline.end("evaluation", state.global_step)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.timeline.end("checkpoint_save", state.global_step)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if self.reporter is None or logs is None:
            return
        mfu = self.reporter.stats.latest_mfu
        if mfu is None:
            return
        logs["teff_mfu"] = mfu
        # The Trainer appended this record to log_history before the callbacks ran.
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1]["teff_mfu"] = mfu

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.finish("finished")

    def finish(self, status: str) -> None:
        """Mark the run ``status``, ending the job's timeline (``job_ended``, or ``failure``)."""
        if self.reporter is not None and not self._ended:
            self._ended = True
            reason = "the process exited before the Trainer's on_train_end" if status == "failed" else None
            self.reporter.end(status, reason=reason)
            atexit.unregister(self._exit_without_end)

    def _exit_without_end(self) -> None:
        self.finish("failed")


def _config_context(model: Any) -> int:
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "seq_length"):
        value = getattr(config, name, None)
        if value:
            return int(value)
    raise ValueError("pass seq_len_tokens= (tokens per training sequence)")
