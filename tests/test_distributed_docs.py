"""The worked examples of docs/distributed.md run (each ```python block, in one
subprocess with 8 simulated CPU devices, each block in a fresh namespace; every block
asserts its own results against PyTorch CPU)."""

from __future__ import annotations

import re
import subprocess
import sys

from distributed_harness import REPO, free_port, worker_env

DOC = REPO / "docs" / "distributed.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_doc_has_an_example_per_parallelism():
    text = "\n".join(blocks())
    for needle in ("distribute_module", "ColwiseParallel", "fully_shard", "mark_sharding", "DistributedDataParallel"):
        assert needle in text, needle


def test_worked_examples_run():
    runner = ("import sys\nfor i, code in enumerate(sys.argv[1:]):\n"
              "    exec(compile(code, f'docs/distributed.md example {i + 1}', 'exec'), {'__name__': '__main__'})\n"
              "    print('example', i + 1, 'ok', flush=True)\n")
    env = worker_env(8)
    env["MASTER_PORT"] = str(free_port())
    proc = subprocess.run([sys.executable, "-c", runner, *blocks()], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    assert proc.stdout.count(" ok") == len(blocks())
