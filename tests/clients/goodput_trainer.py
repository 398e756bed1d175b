"""One attempt of a training job for the goodput end-to-end test (tests/clients/test_goodput_killed.py):
a tiny Llama under the HF Trainer with teff_client's callback, saving every 5 steps, and the test's own
clock written line by line to a JSON-lines file (so a SIGKILL loses nothing it wrote).

    python goodput_trainer.py BASE_URL API_KEY OUTPUT_DIR CLOCK_FILE ATTEMPT MAX_STEPS [RESUME_DIR]
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch
import transformers
from teff_client import Client
from teff_client.integrations.transformers import EfficiencyCallback

SEQ_LEN, BATCH, EVERY = 32, 4, 5
STEP_PAUSE_SECONDS = 0.05  # a step long enough that a kill lands between steps, after a save
HARDWARE = {"custom": {"name": "test-cpu", "peak_tflops": {"fp32": 0.5}}}


def main() -> None:
    base_url, api_key, output_dir, clock_path, attempt, max_steps = sys.argv[1:7]
    resume = sys.argv[7] if len(sys.argv) > 7 else None
    clock = open(clock_path, "a", buffering=1)  # noqa: SIM115 - line-buffered, open for the run

    def note(**fields: Any) -> None:
        clock.write(json.dumps({**fields, "at": time.time()}) + "\n")

    class Clock(transformers.TrainerCallback):
        """After EfficiencyCallback in the list: the same hooks, the test's own clock."""

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            time.sleep(STEP_PAUSE_SECONDS)  # inside the step, so the end-of-step hooks are instant

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            kind = "save_begin" if control.should_save else "step"
            note(kind=kind, step=state.global_step, run_id=efficiency.run_id)

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            note(kind="save_end", step=state.global_step)

    efficiency = EfficiencyCallback(
        seq_len_tokens=SEQ_LEN,
        hardware=HARDWARE,
        report_every_n_steps=EVERY,
        client=Client(base_url, api_key=api_key),
        reporter_options={"flush_interval_seconds": 0.05, "batch_size": 1},
        run_overrides={"cluster": "ci", "scheduler_job_id": "hf-killed-1", "attempt": int(attempt)},
    )
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    ids = torch.randint(0, 256, (BATCH * 100, SEQ_LEN), generator=torch.Generator().manual_seed(1))
    data = [{"input_ids": row, "labels": row.clone()} for row in ids]
    args = transformers.TrainingArguments(
        output_dir=output_dir, per_device_train_batch_size=BATCH, max_steps=int(max_steps),
        logging_steps=EVERY, report_to=[], use_cpu=True, save_strategy="steps", save_steps=EVERY,
        disable_tqdm=True, learning_rate=1e-3,
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=transformers.LlamaForCausalLM(config),
        args=args,
        train_dataset=data,
        callbacks=[efficiency, Clock()],
    )
    trainer.train(resume_from_checkpoint=resume)
    note(kind="done", run_id=efficiency.run_id)


if __name__ == "__main__":
    main()
