"""The pure core: statuses, attempt records, node names and ranges, settings, the typed XCom payloads
the DAG's tasks hand each other, the suite catalog, priority and planning, coverage, pod-outcome
classification, fleet-verdict and quarantine policies, the pool simulator.

No I/O: nothing here talks to Kubernetes, Postgres, the file system or the network, and nothing
imports Airflow. May import: the standard library, pure third-party libraries (hostlist, jsonschema,
msgspec, pydantic) and other ``cluster_doctor.domain`` modules. Everything else imports this.
"""
