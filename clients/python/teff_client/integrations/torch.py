"""A plain PyTorch loop's tracker: one call after each optimizer step.

    tracker = EfficiencyTracker(model, seq_len_tokens=2048, global_batch_sequences=256)
    with tracker:                        # marks the run finished, or failed on an exception
        for batch in loader:
            ...; optimizer.step()
            tracker.step(loss=loss.item())

The run is described from the model (its Hugging Face config, or ``model_ref=`` such as
``{"preset": "llama3-8b"}``), the CUDA device (or ``hardware=`` on CPU), the world size and the
scheduler's environment (Slurm, Kubernetes); the reporter's thread creates it or resumes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from teff_client import Client
from teff_client.integrations._common import (
    StepWindow,
    client_from,
    hardware_ref,
    hf_config_of,
    is_main_process,
    run_description,
    world_size,
)
from teff_client.reporter import Reporter


class EfficiencyTracker:
    def __init__(
        self,
        model: Any = None,
        *,
        seq_len_tokens: int,
        global_batch_sequences: int,
        model_ref: Mapping[str, Any] | None = None,
        hardware: Mapping[str, Any] | str | None = None,
        precision: str = "bf16",
        device_count: int | None = None,
        report_every_n_steps: int = 10,
        client: Client | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        framework: str | None = None,
        tags: list[str] | None = None,
        run_overrides: Mapping[str, Any] | None = None,
        reporter_options: Mapping[str, Any] | None = None,
        first_step: int = 0,
    ) -> None:
        self.enabled = is_main_process()
        self.step_count = first_step
        self.reporter: Reporter | None = None
        self._window: StepWindow | None = None
        if not self.enabled:
            return
        if model_ref is None:
            config = hf_config_of(model)
            if config is None:
                raise ValueError(
                    "pass model_ref= (a preset, dimensions or hf_config) for a model without an HF config"
                )
            model_ref = {"hf_config": config}
        if framework is None:
            import torch

            framework = f"pytorch {torch.__version__}"
        count = device_count or world_size()
        self.run = run_description(
            model=model_ref,
            hardware=hardware_ref(hardware, count),
            precision=precision,
            seq_len_tokens=seq_len_tokens,
            global_batch_sequences=global_batch_sequences,
            framework=framework,
            tags=tags,
            overrides=run_overrides,
        )
        self.client = client_from(client, base_url, api_key)
        self.reporter = self.client.reporter(run=self.run, **dict(reporter_options or {}))
        self._window = StepWindow(self.reporter, report_every_n_steps)
        self._window.start()

    @property
    def run_id(self) -> str | None:
        return self.reporter.run_id if self.reporter else None

    @property
    def latest_mfu(self) -> float | None:
        """The MFU of the latest step the service stored (None until one is)."""
        return self.reporter.stats.latest_mfu if self.reporter else None

    def step(self, *, loss: float | None = None) -> float | None:
        """Call after each optimizer step; returns the mean step time when this step was reported."""
        self.step_count += 1
        if self._window is None:
            return None
        return self._window.step_done(self.step_count, loss=loss)

    def finish(self, status: str = "finished", timeout_seconds: float = 10.0) -> None:
        if self.reporter is not None:
            self.reporter.close(timeout_seconds, status=status)

    def __enter__(self) -> EfficiencyTracker:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.finish("failed" if exc_type is not None else "finished")
