"""Run one DAG run through Airflow's own ``dag.test()`` and report what happened, as JSON.

Used by the end-to-end tests and ``make demo``: ``python tools/dag_runner.py --dag-id continuous_validation
[--conf JSON] [--logical-date ISO] [--out FILE]`` (``command()`` builds that line). Airflow is configured by the environment
(AIRFLOW_HOME, a migrated metadata DB, AIRFLOW_CONN_* connections); see ``airflow_env()``. ``--pool NAME=SLOTS``
upserts a pool first and ``--then DAG_ID CONF FILE`` runs another DAG after it, in the same process: Airflow
imported and the DAG files parsed once (``make demo`` saves a process start and a parse each).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def airflow_env(home: str | os.PathLike, *, extra: dict | None = None) -> dict:
    """Environment for an isolated Airflow: SQLite metadata DB in ``home``, this repo's dags/plugins."""
    home = str(home)
    env = dict(os.environ)
    # The product comes from the installed distribution (editable in the venv), never from a path.
    env.pop("PYTHONPATH", None)
    env.update({
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    })
    env.update(extra or {})
    return env


def command(*args: str) -> list[str]:
    """The command line that runs this module as a script (no PYTHONPATH needed for tools/)."""
    return [sys.executable, str(pathlib.Path(__file__).resolve()), *args]


def airflow(env: dict, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the airflow CLI of this venv."""
    airflow_bin = pathlib.Path(sys.executable).with_name("airflow")
    return subprocess.run([str(airflow_bin), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          check=True)


def prepare(env: dict, pool_slots: int = 2) -> None:
    """Migrate the metadata DB and create the validation pool (a DAG cannot create its own pool)."""
    airflow(env, "db", "migrate")
    airflow(env, "pools", "set", "gpu_validation", str(pool_slots), "GPU validation pods", "--include-deferred")


def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    if bag.import_errors:
        raise SystemExit(f"DAG import errors: {bag.import_errors}")
    return bag


def set_pool(name: str, slots: int) -> None:
    """What ``airflow pools set NAME SLOTS ... --include-deferred`` does, without starting the CLI."""
    from airflow.models.pool import Pool

    Pool.create_or_update_pool(name, slots, "GPU validation pods", include_deferred=True)


def run(dag_id: str, conf: dict | None, logical_date: dt.datetime | None, bag=None) -> dict:
    dag = (bag or dagbag()).dags[dag_id]
    started = time.monotonic()
    dagrun = dag.test(logical_date=logical_date, run_conf=conf or {})
    tis = []
    for ti in dagrun.get_task_instances():
        tis.append({"task_id": ti.task_id, "map_index": ti.map_index, "state": str(ti.state) if ti.state else None,
                    "label": ti.rendered_map_index, "try_number": ti.try_number})
    tis.sort(key=lambda t: (t["task_id"], t["map_index"]))
    summary = None
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=dag_id, run_id=dagrun.run_id, task_id="summarize",
                                                 key="return_value").first()
        if row is not None:
            summary = row.value if not isinstance(row.value, (str, bytes)) else json.loads(row.value)
        from airflow.models.dagrun import DagRun

        note = session.query(DagRun).filter_by(dag_id=dag_id, run_id=dagrun.run_id).one().note
    return {"run_id": dagrun.run_id, "state": str(dagrun.state), "task_instances": tis, "summary": summary,
            "note": note, "took_s": round(time.monotonic() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dag-id", default="continuous_validation")
    parser.add_argument("--conf", default="{}")
    parser.add_argument("--logical-date", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--pool", default=None, help="NAME=SLOTS: upsert this pool first")
    parser.add_argument("--then", nargs=3, action="append", default=[], metavar=("DAG_ID", "CONF", "OUT"),
                        help="then run this DAG too (no logical date), its result to OUT")
    args = parser.parse_args()
    logical = dt.datetime.fromisoformat(args.logical_date.replace("Z", "+00:00")) if args.logical_date else None
    if args.pool:
        name, slots = args.pool.split("=")
        set_pool(name, int(slots))
    bag = dagbag()
    for dag_id, conf, out, when in [(args.dag_id, args.conf, args.out, logical),
                                    *((d, c, o, None) for d, c, o in args.then)]:
        text = json.dumps(run(dag_id, json.loads(conf), when, bag), indent=2, default=str)
        if out:
            pathlib.Path(out).write_text(text)
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
