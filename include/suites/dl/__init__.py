"""dl_unit's test groups, one module each, the shape of checkers/:

* numerics.py: DL ops against float64 (fwd + bwd per dtype); agreement.py: the same outputs run twice
  and on every device (determinism, silent-data-corruption suspects, majority vote);
* gemm.py and membw.py: the GEMM and memory-bandwidth benchmarks, run by bench.py (all GPUs at once,
  the data verified after every chunk) and judged by perf.py (floors, the node's best, the node total);
* training.py: a small CNN must learn; memory.py: most of the free memory pattern-tested;
* devices.py: the devices under test (CUDA GPUs or virtual CPU devices) and which one is computing.

Each group keeps running apart from judging: a runner calls torch and builds an observation (a
dataclass); a pure judge maps observations to Check results (and metrics, judged.py) that name the
device, with a stable code and a message carrying both numbers; the runner records them. compare.py
holds the exact tensor comparisons the runners share. dl_unit.py parses the arguments and wires the
groups; the groups import the harness and baselines, never a suite module.
"""
