"""Moves the clock of every Python program a moved-clock test run starts (tests/clock.py): the hook
`make .venv` installs puts this folder on their path while ``TESTS_CLOCK_OFFSET_S`` is set, and Python
imports ``sitecustomize`` at start. The offset is the run's, in seconds, so every process agrees."""

import os

if os.environ.get("TESTS_CLOCK_OFFSET_S"):
    import datetime as _dt

    import time_machine as _tm

    _tm.travel(_dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=float(os.environ["TESTS_CLOCK_OFFSET_S"])),
               tick=True).start()
