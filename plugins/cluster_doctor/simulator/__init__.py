"""The pool simulator behind ``cluster-doctor simulate``: the product's planner and rules over a simulated
cluster, hour by hour, to size the validation pool and measure the time to detect a broken node.

A client of the domain's rules, never a copy of them: it plans with ``domain.planning.plan``, runs a
bundle's steps by ``domain.planning.steps`` (``stop_cause``, ``done_with_node``), triggers the fast path by
``domain.fast_path.decide`` and reserves by ``domain.reservation``. May import: the standard library and
``cluster_doctor.domain``, nothing else (no I/O: pure Python, seconds at 1,000 nodes); only
``cluster_doctor.cli`` imports it. The contracts in pyproject.toml check this.
"""
