"""Throughput lines of Megatron-LM, torchtitan and NeMo logs, as measurements of the service.

A job that can import nothing still reports: ``teff-client report --from-log train.log --run-id …``
(or its log piped in). Each parser takes one line and returns a measurement or None. Formats:

- Megatron-LM ``training_log`` (megatron/training/training.py): `` [2025-05-27 15:23:07] iteration
  1/ 24000 | consumed samples: 1024 | elapsed time per iteration (ms): 271607.0 | throughput per
  GPU (TFLOP/s/GPU): 40.4 | learning rate: 1.5E-06 | global batch size: 1024 | lm loss: 1.19E+01
  | ...``; the time is the mean over the log interval (newer versions add ``/<running mean>``
  over several intervals: the interval's own is taken), ``iteration`` counts completed iterations.
- torchtitan (torchtitan/train.py, metrics logger): ``[rank0]:[titan] 2025-10-30 14:32:58,897 -
  root - INFO - step:  1  loss:  8.1661  grad_norm:  3.6855  memory:  2.47GiB(3.12%)  tps: 3,502
  tflops: 1.90  mfu: 0.19%``; ``tps`` is tokens per second per device (older logs say ``wps``), the
  line may carry ANSI colour codes.
- NeMo (Lightning progress line): ``Training epoch 0, iteration 97/99 | lr: 1.469e-05 |
  global_batch_size: 128 | global_step: 97 | reduced_train_loss: 6.265 | train_step_timing in s:
  12.22 | consumed_samples: 12544``; ``global_step`` is logged before the optimizer step, so the
  completed steps are global_step + 1.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*m")
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"

_MEGATRON_ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|")
_MEGATRON_TIME = re.compile(rf"elapsed time per iteration \(ms\):\s*({NUMBER})(?:\s*/\s*({NUMBER}))?")
_MEGATRON_BATCH = re.compile(r"global batch size:\s*(\d+)")
_MEGATRON_LOSS = re.compile(rf"\blm loss:\s*({NUMBER})")

_TITAN_STEP = re.compile(r"\bstep:\s*(\d+)(?:/\d+)?")
_TITAN_TPS = re.compile(r"\b(?:tps|wps):\s*([\d,]+(?:\.\d+)?)")
_TITAN_LOSS = re.compile(rf"\bloss:\s*({NUMBER})")
_TITAN_MEMORY = re.compile(rf"\bmemory:\s*({NUMBER})GiB")

_NEMO_ITERATION = re.compile(r"\biteration (\d+)/\d+")
_NEMO_STEP = re.compile(r"\bglobal_step:\s*(\d+)")
_NEMO_TIME = re.compile(rf"train_step_timing in s:\s*({NUMBER})")
_NEMO_BATCH = re.compile(r"\bglobal_batch_size:\s*(\d+)")
_NEMO_LOSS = re.compile(rf"\breduced_train_loss:\s*({NUMBER})")
_NEMO_TPS_GPU = re.compile(rf"\btokens_per_sec_per_gpu:\s*({NUMBER})")


def parse_megatron(line: str) -> dict[str, Any] | None:
    iteration = _MEGATRON_ITERATION.search(line)
    elapsed = _MEGATRON_TIME.search(line)
    batch = _MEGATRON_BATCH.search(line)
    if not (iteration and elapsed and batch):
        return None
    milliseconds = float(elapsed.group(1))
    if milliseconds <= 0:
        return None
    measurement: dict[str, Any] = {
        "step": int(iteration.group(1)),
        "throughput": {
            "step_time_seconds": milliseconds / 1000,
            "global_batch_sequences": int(batch.group(1)),
        },
    }
    loss = _MEGATRON_LOSS.search(line)
    if loss:
        measurement["loss"] = float(loss.group(1))
    return measurement


def parse_torchtitan(line: str) -> dict[str, Any] | None:
    line = ANSI.sub("", line)
    if " - INFO - " not in line and "[titan]" not in line:
        return None
    step = _TITAN_STEP.search(line)
    tps = _TITAN_TPS.search(line)
    if not (step and tps):
        return None
    rate = float(tps.group(1).replace(",", ""))
    if rate <= 0:
        return None
    measurement: dict[str, Any] = {
        "step": int(step.group(1)),
        "throughput": {"tokens_per_second_per_device": rate},
    }
    loss = _TITAN_LOSS.search(line)
    if loss:
        measurement["loss"] = float(loss.group(1))
    memory = _TITAN_MEMORY.search(line)
    if memory:
        measurement["memory_bytes"] = int(float(memory.group(1)) * 2**30)
    return measurement


def parse_nemo(line: str) -> dict[str, Any] | None:
    timing = _NEMO_TIME.search(line)
    if not timing or "[" in line[timing.end() : timing.end() + 3]:
        return None  # NeMo's end-of-run summary lists every step time in brackets: not one step
    step_match = _NEMO_STEP.search(line)
    iteration = _NEMO_ITERATION.search(line)
    if step_match:
        step = int(step_match.group(1)) + 1
    elif iteration:
        step = int(iteration.group(1)) + 1
    else:
        return None
    seconds = float(timing.group(1))
    tps_gpu = _NEMO_TPS_GPU.search(line)
    batch = _NEMO_BATCH.search(line)
    throughput: dict[str, Any]
    if tps_gpu:
        throughput = {"tokens_per_second_per_device": float(tps_gpu.group(1))}
    elif batch and seconds > 0:
        throughput = {"step_time_seconds": seconds, "global_batch_sequences": int(batch.group(1))}
    else:
        return None
    measurement: dict[str, Any] = {"step": step, "throughput": throughput}
    loss = _NEMO_LOSS.search(line)
    if loss:
        measurement["loss"] = float(loss.group(1))
    return measurement


PARSERS: dict[str, Callable[[str], dict[str, Any] | None]] = {
    "megatron": parse_megatron,
    "torchtitan": parse_torchtitan,
    "nemo": parse_nemo,
}


def parse_line(line: str, log_format: str = "auto") -> dict[str, Any] | None:
    if log_format != "auto":
        return PARSERS[log_format](line)
    for parser in PARSERS.values():
        measurement = parser(line)
        if measurement is not None:
            return measurement
    return None


def parse_lines(lines: Iterable[str], log_format: str = "auto") -> Iterator[dict[str, Any]]:
    """Measurements of every throughput line; the format is fixed by the first line that parses."""
    for line in lines:
        measurement = parse_line(line, log_format)
        if measurement is None:
            continue
        if log_format == "auto":
            log_format = next(name for name, parser in PARSERS.items() if parser(line) is not None)
        yield measurement
