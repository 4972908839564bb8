"""Run a command's script with one of its steps turned into a wait, so that a test interrupts it at a known
point: ``python paused_command.py SCRIPT STEP [ARG...]`` loads SCRIPT as a module (its ``argv``:
``SCRIPT ARG...``), replaces STEP (a dotted name in it: ``Fleet.tick``), and runs its ``main`` through
``interrupts.run`` as its ``__main__`` block does. The step's first call prints ``PAUSED_AT STEP`` on
stdout, then a line every moment until the command is interrupted. Nothing else changes: the command's own
servers run, its own handlers and ``finally`` blocks end it.

Why not a signal some seconds after its server started: a small run (one scrape at 60 nodes) can end
before it on a quiet box, and a longer one moves the benchmark's simulated clock past the store's guard
against attempts from the future. The waiting lines are what a closed pipe meets.
"""

from __future__ import annotations

import functools
import importlib.util
import pathlib
import sys
import time

PAUSED = "PAUSED_AT"
EVERY_S = 0.2


def _wait_at(step: str):
    def wait(*_args, **_kwargs):
        print(f"{PAUSED} {step}", flush=True)
        while True:
            time.sleep(EVERY_S)
            print("waiting to be interrupted", flush=True)

    return wait


def main() -> None:
    script, step, *args = sys.argv[1:]
    path = pathlib.Path(script).resolve()
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"paused_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # its definitions; its ``__main__`` block does not run under this name
    *owner, leaf = step.split(".")
    setattr(functools.reduce(getattr, owner, module), leaf, _wait_at(step))
    sys.exit(sys.modules["interrupts"].run(module.main))


if __name__ == "__main__":
    main()
