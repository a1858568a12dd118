"""Inspect AI on N zero-latency mock samples: the same load as agenteval's mock tasks.

Usage: python inspect_mock.py N LOG_DIR (the fleet bench runs it: AGENTEVAL_BENCH_ONLY=inspect). Prints the eval's wall seconds, its status and samples.
The mock model's token counting is replaced by a length estimate: its tokenizer (tiktoken's
o200k_base) is downloaded on first use, and a machine without the internet cannot; counting
nothing makes Inspect faster, never slower, so the comparison stays fair to it.
"""
import sys
import time

import inspect_ai.model._model as model_module
import inspect_ai.model._tokens as tokens_module
from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.scorer import match
from inspect_ai.solver import generate


def estimate(text):
    return len(text) // 4


tokens_module.count_text_tokens = estimate
model_module.count_text_tokens = estimate

n, log_dir = int(sys.argv[1]), sys.argv[2]
task = Task(
    dataset=[Sample(input=f"What is {i} + 1?", target=str(i + 1), id=i) for i in range(n)],
    solver=generate(),
    scorer=match(),
)
started = time.monotonic()
logs = inspect_eval(task, model="mockllm/model", log_dir=log_dir, display="none")
print(f"{time.monotonic() - started:.2f} {logs[0].status} {len(logs[0].samples or [])}")
