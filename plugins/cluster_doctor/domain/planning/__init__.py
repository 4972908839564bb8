"""The one planner of a run (pure, like the rest of the domain: it imports only the domain).

``params``: the run's params (the trigger form, a backfill's conf), checked; ``due``: when a pair is due
and why; ``plan``: which nodes' bundles a run validates next (the DAG's prioritize task, ``cluster-doctor
plan`` and the simulator call its ``plan``); ``steps``: a bundle's order and when it stops. Import the
module you need: this package re-exports nothing, so that ``payloads`` can use ``params`` while ``plan``
uses ``payloads``.
"""
