"""The harness every suite shares, one module per responsibility; imports nothing from the checkers
or the suites (they import it):

  text       one-line messages and number formatting
  checks     Check (one result line), SuiteError
  verdict    the suite's status, reason, code, action and the < 4 KiB summary
  files      atomic writes, the termination log, safe file names
  mounts     which mount a path lives on, and whether it is the root filesystem
  tools      running an external tool in its own process group; stopping children
  inventory  the environment block and the GPU inventory (NVML, else nvidia-smi)
  context    Context: what a suite's run() records checks, metrics and logs through
  cli        the common command line (and its environment variables)
  runner     run_suite / main_entry: signals, watchdog, output files, exit codes 0/1/2
"""
