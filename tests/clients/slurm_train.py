"""The training job the Slurm test submits: a tiny Llama on CPU in a plain PyTorch loop, reported with
teff_client's EfficiencyTracker (the run's Slurm ids come from the job's environment).

    python slurm_train.py STEPS [--crash-at N] [--hard-exit-at N]

--crash-at raises (the tracker marks the run failed); --hard-exit-at leaves with os._exit(3), as an
out-of-memory kill would, so only the srun wrapper can mark the run."""

from __future__ import annotations

import argparse
import json
import os

SEQ_LEN, BATCH = 32, 4
TINY_LLAMA = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 64,
    "tie_word_embeddings": False,
}


def main() -> None:
    import torch
    import transformers
    from teff_client.integrations.torch import EfficiencyTracker

    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--crash-at", type=int)
    parser.add_argument("--hard-exit-at", type=int)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**TINY_LLAMA)
    model = transformers.LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tracker = EfficiencyTracker(
        model,
        seq_len_tokens=SEQ_LEN,
        global_batch_sequences=BATCH,
        precision="fp32",
        hardware={"custom": {"name": "test-cpu", "peak_tflops": {"fp32": 0.5}}},
        report_every_n_steps=5,
        reporter_options={"flush_interval_seconds": 0.1},
    )
    with tracker:
        for step in range(1, args.steps + 1):
            ids = torch.randint(0, 256, (BATCH, SEQ_LEN))
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            tracker.step(loss=loss.item())
            if step == args.crash_at:
                raise RuntimeError(f"crash at step {step}")
            if step == args.hard_exit_at:
                assert tracker.reporter is not None
                tracker.reporter.flush(10)
                os._exit(3)
    print(json.dumps({"run_id": tracker.run_id, "wrapper_run_id": os.environ.get("TEFF_RUN_ID")}))


if __name__ == "__main__":
    main()
