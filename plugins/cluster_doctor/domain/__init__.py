"""The pure core: statuses, attempt records, node names and ranges, settings, the typed XCom payloads
the DAG's tasks hand each other, the suite catalog, the one planner (``planning``), the fast path's
decision, coverage, pod-outcome classification, fleet-verdict and quarantine policies. The pool simulator
is not here: ``cluster_doctor.simulator`` is a client of these rules.

No I/O: nothing here talks to Kubernetes, Postgres, the file system or the network, and nothing
imports Airflow. May import: the standard library but its file, process and network modules (os,
pathlib, io, subprocess, socket, ...), pure third-party libraries (hostlist, jsonschema, msgspec,
pydantic) and other ``cluster_doctor.domain`` modules. Everything else imports this. Two inputs are
read here, by name: the process environment, by pydantic-settings in ``config.Settings.load``, and the
suites' result schema, package data (``results``). The contracts in pyproject.toml and
tests/test_architecture.py check this.
"""
