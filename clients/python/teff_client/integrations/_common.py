"""What every integration shares: the run description from the framework and the environment, the
client from arguments or ``TEFF_URL`` / ``TEFF_API_KEY``, and a step timer."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from teff_client import Client
from teff_client.reporter import Reporter

logger = logging.getLogger("teff_client.integrations")


def client_from(client: Client | None, base_url: str | None, api_key: str | None) -> Client:
    """The given client, or one from ``base_url``/``api_key`` or ``TEFF_URL``/``TEFF_API_KEY``."""
    if client is not None:
        return client
    url = base_url or os.environ.get("TEFF_URL") or "http://127.0.0.1:8000"
    return Client(url, api_key=api_key or os.environ.get("TEFF_API_KEY"))


def scheduler_facts(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """cluster, scheduler_job_id and attempt from the scheduler's environment.

    ``TEFF_CLUSTER`` / ``TEFF_SCHEDULER_JOB_ID`` / ``TEFF_ATTEMPT`` win; then Slurm's
    ``SLURM_CLUSTER_NAME``, ``SLURM_JOB_ID`` (the array job and task for array jobs) and
    ``SLURM_RESTART_COUNT`` (sbatch(1), OUTPUT ENVIRONMENT VARIABLES); then the Kubernetes variables
    the Downward API example in deploy/k8s/examples/training-job-example.yaml sets
    (``TEFF_K8S_JOB_NAME``, ``TEFF_K8S_NAMESPACE``).
    """
    env = os.environ if environ is None else environ
    facts: dict[str, Any] = {}
    if env.get("SLURM_JOB_ID"):
        job = env["SLURM_JOB_ID"]
        if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
            job = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
        facts["scheduler_job_id"] = f"slurm-{job}"
        facts["attempt"] = int(env.get("SLURM_RESTART_COUNT") or 0)
        if env.get("SLURM_CLUSTER_NAME"):
            facts["cluster"] = env["SLURM_CLUSTER_NAME"]
    elif env.get("TEFF_K8S_JOB_NAME"):
        namespace = env.get("TEFF_K8S_NAMESPACE")
        name = env["TEFF_K8S_JOB_NAME"]
        facts["scheduler_job_id"] = f"k8s-{namespace}/{name}" if namespace else f"k8s-{name}"
        facts["attempt"] = 0  # a retried pod finds the ended attempt and takes the next one
    if env.get("TEFF_CLUSTER"):
        facts["cluster"] = env["TEFF_CLUSTER"]
    if env.get("TEFF_SCHEDULER_JOB_ID"):
        facts["scheduler_job_id"] = env["TEFF_SCHEDULER_JOB_ID"]
    if env.get("TEFF_ATTEMPT"):
        facts["attempt"] = int(env["TEFF_ATTEMPT"])
    return facts


def hf_config_of(model: Any) -> dict[str, Any] | None:
    """A Hugging Face model's config.json as a dict (None when the model has no HF config)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_json_string"):
        return None
    return dict(json.loads(config.to_json_string(use_diff=False)))


def device_name() -> str | None:
    """The accelerator's name as ``torch.cuda.get_device_name()`` reports it (None on CPU)."""
    try:
        import torch
    except ImportError:
        return None
    if torch.cuda.is_available():
        return str(torch.cuda.get_device_name())
    return None


def world_size(default: int = 1) -> int:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except ImportError:
        pass
    return int(os.environ.get("WORLD_SIZE") or default)


def is_main_process() -> bool:
    """Rank 0 reports the job's global throughput; the other ranks stay quiet."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()) == 0
    except ImportError:
        pass
    return int(os.environ.get("RANK") or 0) == 0


def hardware_ref(hardware: Mapping[str, Any] | str | None, device_count: int) -> dict[str, Any]:
    """``hardware`` as the API takes it: a catalog id or device name, a ``{"custom": ...}`` part, a
    full ``HardwareRef``; or, when None, the CUDA device this process sees."""
    if hardware is None:
        name = device_name()
        if name is None:
            raise ValueError(
                "no CUDA device: pass hardware=, e.g. {'custom': {'name': 'my-cpu', 'peak_tflops': {'fp32': 1.2}}}"
                " (the catalog has no CPUs) or a catalog id such as 'h100-sxm'"
            )
        return {"accelerator": name, "device_count": device_count}
    if isinstance(hardware, str):
        return {"accelerator": hardware, "device_count": device_count}
    ref = dict(hardware)
    if "accelerator" not in ref and "custom" not in ref:
        ref = {"custom": ref}
    if "count" not in ref:  # a ref in the old name keeps it (the service reads both)
        ref.setdefault("device_count", device_count)
    return ref


def run_description(
    *,
    model: Mapping[str, Any],
    hardware: Mapping[str, Any],
    precision: str,
    seq_len_tokens: int,
    global_batch_sequences: int,
    framework: str | None,
    tags: list[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": dict(model),
        "hardware": dict(hardware),
        "precision": precision,
        "seq_len_tokens": int(seq_len_tokens),
        "global_batch_sequences": int(global_batch_sequences),
        **scheduler_facts(),
    }
    if framework:
        body["framework"] = framework[:100]
    if tags:
        body["tags"] = list(tags)
    body.update(overrides or {})
    return body


class StepWindow:
    """Times optimizer steps on the training thread and hands a report every ``every`` steps: the
    mean wall time per step over the window (data loading included: that is what throughput is)."""

    def __init__(self, reporter: Reporter, every: int) -> None:
        self.reporter = reporter
        self.every = max(1, every)
        self._window_started: float | None = None
        self._steps_in_window = 0

    def start(self) -> None:
        if self._window_started is None:
            self._window_started = time.perf_counter()

    def step_done(self, step: int, *, loss: float | None = None) -> float | None:
        """Call once an optimizer step finished; returns the step time reported, if one was."""
        now = time.perf_counter()
        if self._window_started is None:
            self._window_started = now
            return None
        self._steps_in_window += 1
        if step % self.every != 0:
            return None
        step_time = (now - self._window_started) / self._steps_in_window
        self._window_started, self._steps_in_window = now, 0
        self.reporter.log(step, step_time_seconds=step_time, loss=loss)
        return step_time


class JobTimeline:
    """The goodput events an integration sends (``POST /v1/runs/{id}/events`` through the reporter's
    queue, never blocking the training thread): where the job's wall-clock went outside training
    steps. The service reads them as its goodput decomposition (service/domain/goodput.py).

    * ``job_started`` at the moment the integration was built (the process had just started: the
      script builds its callbacks before the framework starts), then ``restart`` with the attempt
      number when the scheduler says this is a retry (``attempt`` > 0, from :func:`scheduler_facts`);
    * ``startup_done`` when the framework begins training; ``first_step`` after the first step;
    * spans (checkpoint save, checkpoint restore, evaluation) opened and closed by the callbacks at
      the hooks each framework offers; a span still open at the next one's start closes there.
    """

    def __init__(self) -> None:
        self.created_at = time.time()
        self.reporter: Reporter | None = None
        self._first_step_seen = False
        self._open: dict[str, str] = {}  # begin kind -> end kind

    def started(self, reporter: Reporter, *, attempt: int | None, step: int = 0) -> None:
        self.reporter = reporter
        reporter.event("job_started", step=step, at=self.created_at)
        if attempt:
            reporter.event("restart", step=step, attempt=int(attempt), at=self.created_at)
        reporter.event("startup_done", step=step)

    def step_done(self, step: int) -> None:
        if not self._first_step_seen and self.reporter is not None:
            self._first_step_seen = True
            self.reporter.event("first_step", step=step)

    def begin(self, kind: str, step: int | None, *, at: float | None = None) -> None:
        """Open the span ``kind`` (``checkpoint_save``, ``checkpoint_restore``, ``evaluation``) now, or
        at the ``time.time()`` stamp ``at``."""
        if self.reporter is None or kind in self._open:
            return
        self._open[kind] = f"{kind}_end"
        self.reporter.event(f"{kind}_begin", step=step, at=at)

    def end(self, kind: str, step: int | None) -> None:
        if self.reporter is None or self._open.pop(kind, None) is None:
            return
        self.reporter.event(f"{kind}_end", step=step)

    def is_open(self, kind: str) -> bool:
        return kind in self._open
