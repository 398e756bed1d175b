"""The trainer integrations, each training a tiny Llama on CPU against the real server: the stored
measurements and their MFU match what the test computes from the trainer's own step times (its own
callback's clock) and the PaLM FLOPs of the model's own parameter count.

CPU has no catalog entry, so the run's hardware is a custom part with a declared fp32 peak."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from teff_client import Client

from tests.clients.conftest import KeyedServer, require

torch = require("torch")
transformers = require("transformers")

SEQ_LEN = 32
BATCH = 4
STEPS = 30
EVERY = 5
PEAK_TFLOPS = 0.5  # the custom part's declared dense fp32 peak
HARDWARE = {"custom": {"name": "test-cpu", "peak_tflops": {"fp32": PEAK_TFLOPS}}}
REPORTER = {"flush_interval_seconds": 0.05, "batch_size": 1}
STEP_PAUSE_SECONDS = 0.01  # a heavier step: the reporter's answers arrive while training runs


def tiny_llama() -> Any:
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def palm_flops_per_token(model: Any) -> float:
    """PaLM Appendix B: 6·N + 12·L·H·Q·s, N = every parameter (PaLM counts the embeddings)."""
    config = model.config
    parameters = sum(p.numel() for p in model.parameters())
    return 6 * parameters + 12 * config.num_hidden_layers * config.hidden_size * SEQ_LEN


def samples(count: int) -> list[dict[str, Any]]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (count, SEQ_LEN), generator=generator)
    return [{"input_ids": row, "labels": row.clone()} for row in ids]


def window_step_times(first_begin: float, step_ends: dict[int, float]) -> dict[int, float]:
    """Mean step time of each reporting window, from the test's own clock."""
    expected: dict[int, float] = {}
    for step in range(EVERY, STEPS + 1, EVERY):
        start = first_begin if step == EVERY else step_ends[step - EVERY]
        expected[step] = (step_ends[step] - start) / EVERY
    return expected


def check_run(
    client: Client, run_id: str, model: Any, expected_step_times: dict[int, float]
) -> list[dict[str, Any]]:
    run = client.get_run(run_id)
    assert run["status"] == "finished"
    assert run["parameters"]["total"] == sum(p.numel() for p in model.parameters())
    assert run["global_batch_tokens"] == BATCH * SEQ_LEN and run["seq_len_tokens"] == SEQ_LEN
    assert run["precision"] == "fp32" and run["device_count"] == 1
    stored = list(client.iter_measurements(run_id))
    assert [item["step"] for item in stored] == sorted(expected_step_times)
    flops_per_token = palm_flops_per_token(model)
    for item in stored:
        step_time = expected_step_times[item["step"]]
        assert item["throughput"]["step_time_seconds"] == pytest.approx(step_time, rel=0.03)
        expected_mfu = BATCH * SEQ_LEN / step_time * flops_per_token / (PEAK_TFLOPS * 1e12)
        assert item["mfu"] == pytest.approx(expected_mfu, rel=0.03)
    return stored


def test_hf_trainer_run_is_stored_with_the_trainers_step_times(
    keyed_server: KeyedServer, tmp_path: Path
) -> None:
    from teff_client.integrations.transformers import EfficiencyCallback

    class Clock(transformers.TrainerCallback):
        def __init__(self) -> None:
            self.first_begin: float | None = None
            self.ends: dict[int, float] = {}

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.first_begin is None:
                self.first_begin = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            time.sleep(STEP_PAUSE_SECONDS)
            self.ends[state.global_step] = time.perf_counter()

    model = tiny_llama()
    clock = Clock()
    client = Client(keyed_server.base_url, api_key=keyed_server.api_key)
    efficiency = EfficiencyCallback(
        seq_len_tokens=SEQ_LEN,
        hardware=HARDWARE,
        report_every_n_steps=EVERY,
        client=client,
        reporter_options=REPORTER,
        run_overrides={"cluster": "ci", "scheduler_job_id": "hf-1"},
    )
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=BATCH,
        max_steps=STEPS,
        logging_steps=EVERY,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        learning_rate=1e-3,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=samples(BATCH * STEPS), callbacks=[clock, efficiency]
    )
    trainer.train()
    assert efficiency.run_id is not None
    assert clock.first_begin is not None
    stored = check_run(client, efficiency.run_id, model, window_step_times(clock.first_begin, clock.ends))
    logged = [entry["teff_mfu"] for entry in trainer.state.log_history if "teff_mfu" in entry]
    assert logged, "the MFU the service answered shows in the Trainer's logs"
    assert all(any(value == pytest.approx(item["mfu"]) for item in stored) for value in logged)
    client.close()


def test_hf_trainer_checkpoints_and_a_resumed_attempt_become_the_jobs_goodput(
    keyed_server: KeyedServer, tmp_path: Path
) -> None:
    """A run that saves a checkpoint every 5 steps, then a second attempt of the same job resumed from
    its last checkpoint: the service's badput for saves and the restore equals what this test timed
    with its own callback at the same hooks, and the job has both attempts."""
    from teff_client.integrations.transformers import EfficiencyCallback

    class SaveClock(transformers.TrainerCallback):
        """Listed after EfficiencyCallback: times each save from the step that triggers it to on_save."""

        def __init__(self) -> None:
            self.save_began: float | None = None
            self.save_seconds: list[float] = []

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if control.should_save:
                self.save_began = time.time()

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            assert self.save_began is not None
            self.save_seconds.append(time.time() - self.save_began)

    client = Client(keyed_server.base_url, api_key=keyed_server.api_key)
    job = {"cluster": "ci", "scheduler_job_id": "hf-goodput-1"}

    def train(max_steps: int, attempt: int, resume: str | None) -> tuple[EfficiencyCallback, SaveClock]:
        efficiency = EfficiencyCallback(
            seq_len_tokens=SEQ_LEN,
            hardware=HARDWARE,
            report_every_n_steps=EVERY,
            client=client,
            reporter_options=REPORTER,
            run_overrides={**job, "attempt": attempt},
        )
        clock = SaveClock()
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path),
            per_device_train_batch_size=BATCH,
            max_steps=max_steps,
            logging_steps=EVERY,
            report_to=[],
            use_cpu=True,
            save_strategy="steps",
            save_steps=EVERY,
            disable_tqdm=True,
            learning_rate=1e-3,
        )
        trainer = transformers.Trainer(
            model=tiny_llama(),
            args=args,
            train_dataset=samples(BATCH * 20),
            callbacks=[efficiency, clock],
        )
        trainer.train(resume_from_checkpoint=resume)
        return efficiency, clock

    first, first_clock = train(10, attempt=0, resume=None)
    restore_began = time.time()
    second, second_clock = train(20, attempt=1, resume=str(tmp_path / "checkpoint-10"))
    assert first.run_id is not None and second.run_id is not None
    assert len(first_clock.save_seconds) == 2 and len(second_clock.save_seconds) == 2

    goodput = client.get_goodput(second.run_id)
    assert sorted(goodput["job_run_ids"]) == sorted([first.run_id, second.run_id])
    assert [attempt["attempt"] for attempt in goodput["attempts"]] == [0, 1]
    assert not any(attempt["failed"] for attempt in goodput["attempts"])
    badput = {item["kind"]: item["seconds"] for item in goodput["badput"]}
    saved = sum(first_clock.save_seconds + second_clock.save_seconds)
    # Same hooks, two clocks a few microseconds apart; the reporter stamps events on the training
    # thread, so the only gap is the hooks' order within one callback round.
    assert badput["checkpoint_save"] == pytest.approx(saved, rel=0.05, abs=0.02)
    restore_window = time.time() - restore_began
    assert 0 < badput["checkpoint_restore"] < restore_window
    assert goodput["warnings"] == [], goodput["warnings"]
    client.close()


# Lightning's advice for this machine (third-party, not ours): srun is installed here for the Slurm
# test, and a tiny in-memory dataset needs no loader workers.
@pytest.mark.filterwarnings("ignore:The `srun` command is available")
@pytest.mark.filterwarnings("ignore:The '.*dataloader' does not have many workers")
@pytest.mark.filterwarnings("ignore:GPU available but not used")
@pytest.mark.filterwarnings("ignore:`isinstance.treespec, LeafSpec.` is deprecated:FutureWarning")
def test_lightning_run_is_stored_with_the_trainers_step_times(
    keyed_server: KeyedServer, tmp_path: Path
) -> None:
    lightning = require("lightning")
    from teff_client.integrations.lightning import EfficiencyCallback

    class TinyModule(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = tiny_llama()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class Clock(lightning.Callback):
        def __init__(self) -> None:
            self.first_begin: float | None = None
            self.ends: dict[int, float] = {}

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if self.first_begin is None:
                self.first_begin = time.perf_counter()

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            time.sleep(STEP_PAUSE_SECONDS)
            self.ends[trainer.global_step] = time.perf_counter()

    module = TinyModule()
    clock = Clock()
    client = Client(keyed_server.base_url, api_key=keyed_server.api_key)
    efficiency = EfficiencyCallback(
        hardware=HARDWARE,
        report_every_n_steps=EVERY,
        client=client,
        reporter_options=REPORTER,
        run_overrides={"cluster": "ci", "scheduler_job_id": "lightning-1"},
    )
    loader = torch.utils.data.DataLoader(samples(BATCH * STEPS), batch_size=BATCH)
    trainer = lightning.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        devices=1,
        logger=lightning.pytorch.loggers.CSVLogger(tmp_path),
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[clock, efficiency],
    )
    trainer.fit(module, loader)
    assert efficiency.run_id is not None and clock.first_begin is not None
    stored = check_run(
        client, efficiency.run_id, module.model, window_step_times(clock.first_begin, clock.ends)
    )
    metrics = next(tmp_path.rglob("metrics.csv")).read_text()
    assert "teff_mfu" in metrics.splitlines()[0], "the MFU is logged where Lightning logs"
    logged = float(trainer.callback_metrics["teff_mfu"])
    assert any(logged == pytest.approx(item["mfu"], rel=1e-5) for item in stored)
    client.close()


@pytest.mark.filterwarnings("ignore:The `srun` command is available")
@pytest.mark.filterwarnings("ignore:The '.*dataloader' does not have many workers")
@pytest.mark.filterwarnings("ignore:GPU available but not used")
@pytest.mark.filterwarnings("ignore:`isinstance.treespec, LeafSpec.` is deprecated:FutureWarning")
# The resumed attempt writes its checkpoints beside the first attempt's, on purpose.
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
# A mid-epoch resume over a plain DataLoader (Lightning's advice: a resumable loader); the data here
# are identical samples, so which ones are replayed does not matter.
@pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended")
def test_lightning_checkpoints_and_a_resumed_attempt_become_the_jobs_goodput(
    keyed_server: KeyedServer, tmp_path: Path
) -> None:
    """Lightning saving every 5 steps, then attempt 1 resumed from the last checkpoint (ckpt_path):
    the service's save badput equals the save windows this test timed at the same hooks, and the
    resumed attempt has a restore."""
    lightning = require("lightning")
    from teff_client.integrations.lightning import EfficiencyCallback

    class TinyModule(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = tiny_llama()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class SaveClock(lightning.Callback):
        def __init__(self) -> None:
            self.began: float | None = None
            self.save_seconds: list[float] = []

        def _close(self) -> None:
            if self.began is not None:
                self.save_seconds.append(time.time() - self.began)
                self.began = None

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
            self.began = time.time()

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            self._close()

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            self._close()

    client = Client(keyed_server.base_url, api_key=keyed_server.api_key)

    def fit(max_steps: int, attempt: int, ckpt_path: str | None) -> tuple[EfficiencyCallback, SaveClock]:
        efficiency = EfficiencyCallback(
            hardware=HARDWARE,
            report_every_n_steps=EVERY,
            client=client,
            reporter_options=REPORTER,
            run_overrides={"cluster": "ci", "scheduler_job_id": "lightning-goodput-1", "attempt": attempt},
        )
        clock = SaveClock()
        checkpoints = lightning.pytorch.callbacks.ModelCheckpoint(
            dirpath=tmp_path / "ckpt", every_n_train_steps=EVERY, save_top_k=-1
        )
        trainer = lightning.Trainer(
            max_steps=max_steps,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            # The clock first: at the fit's end the integration's callback closes its reporter
            # (delivering what is left), which the clock must not count as saving.
            callbacks=[clock, efficiency, checkpoints],
        )
        loader = torch.utils.data.DataLoader(samples(BATCH * 20), batch_size=BATCH)
        trainer.fit(TinyModule(), loader, ckpt_path=ckpt_path)
        return efficiency, clock

    first, first_clock = fit(10, 0, None)
    resume = sorted((tmp_path / "ckpt").glob("*step=10*.ckpt"))
    assert resume, list((tmp_path / "ckpt").iterdir())
    with warnings.catch_warnings():  # each attempt saves to its own folder, as Lightning notes
        warnings.filterwarnings("ignore", message=".*dirpath has changed from")
        second, second_clock = fit(20, 1, str(resume[0]))
    assert first.run_id is not None and second.run_id is not None
    assert first_clock.save_seconds and second_clock.save_seconds

    goodput = client.get_goodput(second.run_id)
    assert sorted(goodput["job_run_ids"]) == sorted([first.run_id, second.run_id])
    assert [attempt["attempt"] for attempt in goodput["attempts"]] == [0, 1]
    badput = {item["kind"]: item["seconds"] for item in goodput["badput"]}
    saved = sum(first_clock.save_seconds + second_clock.save_seconds)
    assert badput["checkpoint_save"] == pytest.approx(saved, rel=0.05, abs=0.02)
    assert badput["checkpoint_restore"] > 0
    assert goodput["warnings"] == [], goodput["warnings"]
    client.close()
