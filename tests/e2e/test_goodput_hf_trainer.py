"""End to end: a tiny Hugging Face Trainer run saves checkpoints, fails, and resumes as attempt 1; its
events go to the service from a TrainerCallback (httpx), and the service's goodput and badput match
the durations this test measured itself.

Skipped unless torch 2.13.0 (the CPU wheel on disk) and transformers are installed.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not torch.__version__.startswith("2.13.0"):
    pytest.skip(
        f"needs torch 2.13.0 (the CPU wheel on disk), found {torch.__version__}", allow_module_level=True
    )

from tests.api.conftest import StoreClient, open_store_client  # noqa: E402

FAIL_AT_STEP = 10
SAVE_EVERY_STEPS = 4
IDLE_SECONDS = 0.5


class Killed(RuntimeError):
    pass


class EventReporter(transformers.TrainerCallback):  # type: ignore[misc]
    """Posts the run's events as they happen and keeps what it sent (time per kind) for the test."""

    def __init__(self, store: StoreClient, run_id: str, fail_at_step: int | None) -> None:
        self.store, self.run_id, self.fail_at_step = store, run_id, fail_at_step
        self.sent: list[tuple[str, datetime]] = []
        self._first_step_sent = False

    def post(self, kind: str, **extra: Any) -> datetime:
        at = datetime.now(UTC)
        body = {"event_id": f"{kind}-{len(self.sent)}", "kind": kind, "time": at.isoformat(), **extra}
        response = self.store.client.post(
            f"/v1/runs/{self.run_id}/events", json=body, headers=self.store.writer
        )
        assert response.status_code == 200, response.text
        self.sent.append((kind, at))
        return at

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step > 0:  # resumed: the checkpoint has been loaded by now
            self.post("checkpoint_restore_end", step=state.global_step)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._first_step_sent:
            self._first_step_sent = True
            self.post("first_step", step=state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.fail_at_step is not None and state.global_step == self.fail_at_step:
            raise Killed(f"killed at step {state.global_step}")
        if control.should_save:  # DefaultFlowCallback ran first and decided; the save follows
            self.post("checkpoint_save_begin", step=state.global_step)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.post("checkpoint_save_end", step=state.global_step)


def _trainer(output_dir: Path, reporter: EventReporter) -> Any:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=32)
    model = transformers.GPT2LMHeadModel(config)
    data = [{"input_ids": (ids := torch.randint(0, 64, (32,))), "labels": ids} for _ in range(64)]
    args = transformers.TrainingArguments(
        output_dir=str(output_dir),
        max_steps=16,
        save_steps=SAVE_EVERY_STEPS,
        save_strategy="steps",
        per_device_train_batch_size=2,
        logging_steps=100,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    return transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[reporter])


def _seconds(sent: list[tuple[str, datetime]], begin: str, end: str) -> float:
    begins = [at for kind, at in sent if kind == begin]
    ends = [at for kind, at in sent if kind == end]
    return sum((b - a).total_seconds() for a, b in zip(begins, ends, strict=True))


def test_a_killed_and_resumed_trainer_run_has_the_goodput_it_measured(tmp_path: Path) -> None:
    with open_store_client("sqlite", tmp_path / "db") as store:
        job = {
            "cluster": "laptop",
            "scheduler_job_id": "hf-e2e",
            "hardware": {"accelerator": "h100-sxm", "device_count": 2},
        }
        first = EventReporter(store, store.create_run(attempt=0, **job)["id"], fail_at_step=FAIL_AT_STEP)
        start0 = first.post("job_started")
        with pytest.raises(Killed):
            _trainer(tmp_path / "out", first).train()
        failed_at = first.post("failure", reason="killed by the test", step=FAIL_AT_STEP)
        time.sleep(IDLE_SECONDS)

        second = EventReporter(store, store.create_run(attempt=1, **job)["id"], fail_at_step=None)
        start1 = second.post("job_started")
        second.post("checkpoint_restore_begin")
        _trainer(tmp_path / "out", second).train(resume_from_checkpoint=True)
        end1 = second.post("job_ended")

        answer = store.client.get(f"/v1/runs/{second.run_id}/goodput", headers=store.reader).json()

    badput = {item["kind"]: item["seconds"] for item in answer["badput"]}
    saves = _seconds(first.sent, "checkpoint_save_begin", "checkpoint_save_end") + _seconds(
        second.sent, "checkpoint_save_begin", "checkpoint_save_end"
    )
    last_save_end = max(at for kind, at in first.sent if kind == "checkpoint_save_end")
    first_step0 = next(at for kind, at in first.sent if kind == "first_step")
    first_step1 = next(at for kind, at in second.sent if kind == "first_step")
    restore = _seconds(second.sent, "checkpoint_restore_begin", "checkpoint_restore_end")
    attempts = (failed_at - start0).total_seconds() + (end1 - start1).total_seconds()
    idle = (start1 - failed_at).total_seconds()

    assert len([kind for kind, _ in first.sent if kind == "checkpoint_save_end"]) == 2  # steps 4 and 8
    assert answer["total_seconds"] == pytest.approx(attempts + idle, abs=1e-3)
    assert badput["idle_between_attempts"] == pytest.approx(idle, abs=1e-3)
    assert idle >= IDLE_SECONDS
    assert badput["checkpoint_save"] == pytest.approx(saves, abs=1e-3)
    assert badput["lost_progress"] == pytest.approx((failed_at - last_save_end).total_seconds(), abs=1e-3)
    assert badput["checkpoint_restore"] == pytest.approx(restore, abs=1e-3)
    # initialisation: start to first step, less the restore that lies inside it on attempt 1
    init = (first_step0 - start0).total_seconds() + (first_step1 - start1).total_seconds() - restore
    assert badput["initialisation"] == pytest.approx(init, abs=1e-3)
    productive = attempts - init - restore - saves - badput["lost_progress"]
    assert answer["productive_seconds"] == pytest.approx(productive, abs=1e-3)
    assert answer["goodput"] == pytest.approx(productive / (attempts + idle), abs=1e-6)
    assert answer["checkpoint"]["mtbf_seconds"] == pytest.approx(attempts, abs=1e-3)
