"""continuous_validation: keep every GPU node's validation fresh, hourly, on free nodes only.

Thin on purpose: the behaviour of each task lives in ``cluster_doctor.airflow.tasks`` (one hop away), the
validation pod in ``cluster_doctor.airflow.operator``, the defaults in ``cluster_doctor.domain.config``.
Each task takes its context, results store and Kubernetes client from one handle
(``cluster_doctor.airflow.runtime.TaskRun``), turns XComs into the typed payloads of
``cluster_doctor.domain.payloads`` and back (``from_xcom`` / ``to_xcom``) and calls its stage's function;
each returns one XCom, the whole payload (``multiple_outputs=False``).
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param, TaskGroup, TriggerRule, chain, task, task_group
from cluster_doctor.airflow.operator import NodeValidationPodOperator
from cluster_doctor.domain import suites
from cluster_doctor.domain.planning import plan as planner
from cluster_doctor.domain.planning.steps import bundle_order, pool_weights
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import NODE_RANGE_PATTERN
from cluster_doctor.domain.payloads import PeerTest, PeerTests
from cluster_doctor.domain.peers import PEER_SUITE
from cluster_doctor.kube.peers import PEER_GRACE_S

# Only the pool, the DagRun timeout and the schedule are fixed at parse time (environment CLUSTER_DOCTOR_*); every
# other setting, per-task timeouts included, is read at run time with the Variable
# cluster_doctor_settings, and discover refuses a Variable that changes what parsing fixed.
SETTINGS = Settings.load()
# The validate group's steps, in the order a node's suites run: health first, then the enabled order.
# Only the suites enabled at parse time (CLUSTER_DOCTOR_TESTS): a step costs a task per node and run,
# and discover refuses a run that asks for a suite without one.
STEPS = bundle_order(SETTINGS.tests)
STEP_IDS = [f"validate.{test}" for test in STEPS]
# The sweep group's steps: the short health suites among those, health first.
SWEEP_STEPS = [test for test in STEPS if test in planner.SWEEP_SUITES]
SWEEP_STEP_IDS = [f"sweep.{test}" for test in SWEEP_STEPS]
# Pool priority (absolute): every sweep step below every step of a due bundle, so sweeps use the pool after
# the bundles; a node's later steps above other nodes' first ones.
WEIGHTS = pool_weights(STEPS, SWEEP_STEPS)
# A validate step's label in the grid (map_index_template): "node · test", and "· not due" where its node's
# bundle (the rendered Bundle XCom) does not plan the suite this run: skipped without an attempt, so it
# reads apart at a glance from a skipped step that was an attempt (timeout, preempted, stopped by a failed
# health check: recorded skipped).
NOT_DUE = "not due"
STEP_LABEL = ("{{ task.node_name }} · {{ task.test_name }}{% if task.bundle and task.test_name not in "
              "task.bundle.steps | map(attribute='test_name') | list %} · " + NOT_DUE + "{% endif %}")
# A peer test holds two nodes at once: a pool slot for each (never more than the pool has).
PEER_POOL_SLOTS = min(2, SETTINGS.pool_slots)


DOC_MD = """
### Continuous validation of GPU nodes

Every hour this DAG validates the GPU nodes that are **free right now**, stalest first, without
taking nodes from users:

1. **discover** — GPU nodes of the cluster (`kubernetes_default`): free ones, and why the others are
   not eligible (busy, cordoned, not ready, tainted), written to the GPU node inventory
   (`gpu_node_inventory` in `validation_db`) that every view of the fleet counts; then the **signals**
   the cluster already has (GPUs withdrawn by the device plugin, node conditions and events of
   node-problem-detector / NVSentinel, failed user pods, DCGM metrics, reboots): a node they point at is
   *suspect*, never failed (`node_suspicions`; the DAG `suspect_signals` reads them every few minutes too
   and starts a run for new free suspects when none is going).
   Then **reap_orphans**: pods of tasks that died hard (OOM, SIGKILL) are recorded from the pod and deleted.
2. **load_latest** — their latest results from `validation_latest` (`validation_db`).
   **reserve** (opt-in, setting `reservation`): suspect nodes, busy or free, and overdue busy nodes get a
   NoSchedule taint so their next free moment is ours; they are validated first when they free, then released.
3. **prioritize** — suspect nodes' whole bundles first, then never-validated pairs, then the oldest;
   failed pairs are retested after 6 h; a chosen node runs **every due suite** (its bundle), at most `max_pairs` pairs. The planned
   nodes are claimed in the results DB (`validation_claims`): a node another live run holds (backfill,
   manual trigger) is left to it. A run that plans nothing says why (its log, `verdict`, its note).
4. **ship_suites** — the suite code as an immutable ConfigMap (its hash is the `suite_version`).
5. **validate** — a task group mapped per node: its suites one after another, one pod each (pool
   `gpu_validation`), `gpu_health` first (failing, it skips the rest), pinned by node affinity, lowest
   priority: deleted if a user pod claims the node while it waits, or if it stays Pending too long; a
   user pod claiming the node stops the remaining suites. **finish_node** releases the node.
   **sweep**, beside it: the health sweep — free nodes with no due suite whose last health check is
   older than `sweep_interval_hours` (1 h) run `gpu_health` (and `ib_health` where enabled), the same
   way, after the due bundles: every sweep step has a lower pool priority than any bundle's step.
   **peers**, beside it (opt-in, setting `peer_tests`): **plan** pairs free nodes no bundle uses by
   GPU model and claims them; each **test** runs `fabric_peer` between its two nodes (server pod
   first, the client given its IP; both Running within the pending timeout or both given up; a user
   pod claiming either node stops both; two pool slots), each side's row naming its peer; **finish**
   releases them. One failed peer test blames neither node: both are suspect until triangulated.
6. **record** — one `validation_history` row per attempt, whatever happened.
7. **summarize** / **verdict** — counts, newly failing nodes, coverage; the run's note says it too.
   Beside them, opt-in: **quarantine** (setting `quarantine`) labels/taints nodes with confirmed
   failures, releases the repaired ones that pass again and names repeat offenders (action `replace`,
   kept out until a person removes the label); **handoff** (setting `handoff_conn_id`) posts new repeat
   offenders and failures needing `drain_and_service` to a ticketing webhook; **node_conditions** (setting `node_conditions`) sets every GPU node's
   `ClusterDoctorHealthy` condition from its latest verdicts; **accept** (setting `acceptance`) removes
   the acceptance gate's taint from gated nodes whose whole bundle passed, right after the record.

**Reading the grid.** Each step of the `validate` group is labelled `node · test`, a peer test
`server ↔ client`. Green: the node passed. Red: the node failed a check or the suite errored — the
end of the task log lists the failing checks with device and numbers (an image that cannot be pulled
is red too). Pink (skipped): the attempt did not run the suite (timeout, preempted by a user job, node
busy at submit time, an earlier suite of the node stopped the rest); it is recorded and the pair stays
due. A step labelled `node · test · not due` is pink too, but no attempt: its node's bundle did not
plan that suite in this run.

**The DagRun state** is what to alert on: *failed* means this run found at least one node failing a
check (or a suite erroring) — `verdict` names them — or the run broke: discovery, planning,
recording or summarizing failed (cluster API or results DB unreachable), or a planned validation
never reported, or the results PVC the pods mount is missing or unbound (checked once per run in
`discover`: then no pod is created and `verdict` names the claim). Timeouts, preemptions and skips
never fail a run.

**Trigger form.** `node_range` (e.g. `gpu-[001-064]`, `gpu-a*`), `tests`, `stale_before` (re-validate
results older than this, e.g. after a driver upgrade), `max_pairs`, `dry_run` (plan only). The same
keys work as `--dag-run-conf` of `airflow backfill create` to walk a node range over several runs.
"""

with DAG(
    dag_id="continuous_validation",
    description="Validate free GPU nodes hourly, stalest first; results in validation_latest",
    schedule=SETTINGS.schedule,  # @hourly unless the deployment sets CLUSTER_DOCTOR_SCHEDULE
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=dt.timedelta(seconds=SETTINGS.dagrun_timeout_s),
    tags=["cluster-doctor", "gpu", "validation"],
    doc_md=DOC_MD,
    default_args={"retries": 0, "owner": "cluster-doctor"},
    params={
        # nullable: the UI makes a plain string field required, and "empty = every node" must submit
        "node_range": Param(
            None, type=["null", "string"], pattern=NODE_RANGE_PATTERN, maxLength=4096, title="Node range",
            description="Hostlist or glob expression, e.g. gpu-[001-064,100] or gpu-a*. Empty: every GPU node."),
        # `examples` is what makes the Airflow UI render an array as a multi-select
        "tests": Param(
            list(SETTINGS.tests), type="array", title="Tests", examples=list(STEPS),
            items={"type": "string", "enum": list(STEPS)}, minItems=1,
            description="Suites to run: " + "; ".join(f"{suites.CATALOG[t].name}: {suites.CATALOG[t].title}"
                                                       for t in STEPS)),
        "stale_before": Param(
            None, type=["null", "string"], format="date-time", title="Stale before",
            description="Re-validate every pair whose last executed result is older than this (UTC). "
                        "Use after a driver upgrade or repair."),
        "max_pairs": Param(
            None, type=["null", "integer"], minimum=0, maximum=1_000_000, title="Max pairs",  # planning.params.MAX_PAIRS
            description=f"At most this many node-test pairs in this run (default {SETTINGS.max_pairs_per_run})."),
        "dry_run": Param(False, type="boolean", title="Dry run",
                         description="Plan only: log the pairs that would run, create no pod."),
    },
) as dag:

    @task(multiple_outputs=False)
    def discover() -> dict:
        from cluster_doctor.airflow import runtime, tasks

        run = runtime.TaskRun.current(runtime.load_settings())
        return tasks.discover(run.context["params"], run.settings, run.core_v1, parsed=SETTINGS, store=run.store,
                              run_id=run.run_id, waited=tasks.waited_for(run.context["dag_run"])).to_xcom()

    # Pods whose task process died hard (OOM, SIGKILL) outlive it: record their result from the pod,
    # delete them. Reports and carries on: its problems never block this run's planning.
    @task(multiple_outputs=False)
    def reap_orphans(discovered: dict) -> dict:
        from cluster_doctor.airflow import runtime, tasks

        run = runtime.TaskRun.current(discovered=discovered)
        return tasks.reap_orphans(run.found, run.core_v1, run.store, run_state=run.ti.get_dagrun_state).to_xcom()

    # After reap_orphans, so what it records counts in this run.
    @task(multiple_outputs=False)
    def load_latest() -> dict:
        from cluster_doctor.airflow import runtime, tasks

        run = runtime.TaskRun.current()
        return tasks.load_latest(run.found, run.store).to_xcom()

    # Opt-in (setting reservation): taint overdue busy nodes so their next free moment is ours; release
    # those held too long. Its breaker never stops this run's validations (the verdict reports it).
    @task(multiple_outputs=False)
    def reserve(discovered: dict) -> dict:
        from cluster_doctor.airflow import runtime, tasks

        run = runtime.TaskRun.current(discovered=discovered)
        return tasks.reserve(run.found, run.store, run.core_v1, run_id=run.run_id).to_dict()

    # Claims the planned nodes in the results DB: overlapping runs (backfill, manual) never share a node.
    @task(multiple_outputs=False)
    def prioritize(latest: dict | list, reserved: dict) -> dict:
        from cluster_doctor.airflow import runtime, tasks
        from cluster_doctor.domain.payloads import Latest
        from cluster_doctor.kube.reservation import ReservationReport

        run = runtime.TaskRun.current()
        return tasks.prioritize(run.found, Latest.from_xcom(latest), store=run.store, dag_id=run.dag_id,
                                run_id=run.run_id, run_ended=run.run_ended,
                                reserved=ReservationReport.from_dict(reserved).free).to_xcom()

    # One Bundle per planned node: what the validate task group is mapped over; reads prioritize's plan by id.
    @task
    def ship_suites() -> list:
        from cluster_doctor.airflow import runtime, tasks
        from cluster_doctor.domain.payloads import Plan

        run = runtime.TaskRun.current()
        return [b.to_xcom() for b in tasks.ship_suites(run.found, Plan.from_xcom(run.pulled("prioritize")),
                                                       run.core_v1)]

    # The validate group's last task, whatever its steps did: the run's claim on the node goes, and a
    # reserved node loses our taint once its validation is done.
    @task(trigger_rule=TriggerRule.ALL_DONE, map_index_template="{{ node_name }}")
    def finish_node(bundle: dict, step_ids: list) -> str:
        from cluster_doctor.airflow import runtime, tasks
        from cluster_doctor.domain.payloads import Bundle

        found = Bundle.from_xcom(bundle)
        run = runtime.TaskRun.current(found.run_config.settings)
        run.context["node_name"] = found.node_name  # the instance's label in the grid
        reported = run.pulled(step_ids, key="attempt", map_indexes=run.ti.map_index) or []
        return tasks.finish_node(found, reported, run.store, run.core_v1 if found.reserved else None,
                                 dag_id=run.dag_id, run_id=run.run_id)

    # Runs whatever the validations did (an empty plan maps zero validations: ALL_DONE still runs);
    # it skips itself when discovery or planning failed.
    @task(trigger_rule=TriggerRule.ALL_DONE, retries=3, retry_delay=dt.timedelta(seconds=30),
          multiple_outputs=False)
    def record() -> dict:
        from cluster_doctor.airflow import runtime, tasks

        run = runtime.TaskRun.current()
        found, planned = run.planned_or_skip("nothing was planned, nothing to record")
        reported = tasks.reported_attempts(
            run.pulled(STEP_IDS + SWEEP_STEP_IDS, key="attempt"), run.pulled(["peers.test"], key="attempts"),
            PeerTests.from_xcom(run.pulled("peers.plan")), dag_id=run.dag_id, run_id=run.run_id)
        return tasks.record(planned, reported, run.store, dag_id=run.dag_id, run_id=run.run_id,
                            settings=found.settings).to_xcom()

    @task(trigger_rule=TriggerRule.ALL_DONE, multiple_outputs=False)
    def summarize(recorded: dict | list | None) -> dict:
        from cluster_doctor.airflow import runtime, tasks
        from cluster_doctor.domain.payloads import Recorded
        from cluster_doctor.kube.reservation import ReservationReport

        run = runtime.TaskRun.current()
        found, planned = run.planned_or_skip("no run to summarize")
        recorded = tasks.recorded_or_fail(found, planned, None if recorded is None else Recorded.from_xcom(recorded))
        breaker = ReservationReport.from_dict(run.pulled("reserve")).breaker_reason
        return tasks.summarize(found, planned, recorded, run.store, dag_id=run.dag_id, run_id=run.run_id,
                               waited=tasks.waited_for(run.context["dag_run"]), reservation_breaker=breaker).to_xcom()

    # The DagRun's state is what alerting hangs on: this leaf fails when a node failed a check, and
    # also when the run could not discover, plan, record or summarize.
    @task(trigger_rule=TriggerRule.ALL_DONE)
    def verdict(summary: dict | None) -> None:
        from cluster_doctor.airflow import tasks
        from cluster_doctor.domain.payloads import RunSummary

        tasks.verdict(None if summary is None else RunSummary.from_xcom(summary))

    # The wiring draws the Graph view: one line from discover to verdict, reserve beside the reaping and
    # loading, the validate and peers groups side by side between ship_suites and record; tasks read the
    # XComs of tasks further up by id (``TaskRun.pulled``), not as arguments, so no edge crosses the graph.
    discovered = discover()
    latest = reap_orphans(discovered) >> load_latest()
    planned = prioritize(latest, reserve(discovered))

    bundles = ship_suites()
    planned >> bundles

    # Opt-in (setting peer_tests): tests BETWEEN two free nodes no bundle uses, beside validate; their nodes
    # are claimed beside the bundles' (claims.claim keep_others).
    with TaskGroup(group_id="peers", tooltip="tests between two nodes: plan, one test per pair, finish"):
        @task(multiple_outputs=False)
        def plan() -> list:
            from cluster_doctor.airflow import runtime, tasks
            from cluster_doctor.domain.payloads import Plan

            run = runtime.TaskRun.current()
            return tasks.peers.plan(run.found, Plan.from_xcom(run.pulled("prioritize")), run.store, run.core_v1,
                                    dag_id=run.dag_id, run_id=run.run_id, run_ended=run.run_ended,
                                    # the suite code it shipped for the bundles, not shipped twice
                                    shipped=tasks.shipped(run.pulled("ship_suites"))).to_xcom()

        # One instance per pair, both pods to their end; a pool slot per node.
        @task(pool=SETTINGS.pool, pool_slots=PEER_POOL_SLOTS, retries=0, priority_weight=WEIGHTS.peer,
              weight_rule="absolute",
              execution_timeout=dt.timedelta(seconds=SETTINGS.task_timeout_s(PEER_SUITE) + PEER_GRACE_S + 60),
              map_index_template="{{ label }}")
        def test(peer_test: dict) -> str:
            from cluster_doctor.airflow import runtime, tasks

            found = PeerTest.from_xcom(peer_test)
            run = runtime.TaskRun.current(found.run_config.settings)
            run.context["label"] = found.label  # the instance's label in the grid
            attempts = tasks.peers.run_peer_test(found, run.core_v1, run.store, dag_id=run.dag_id,
                                                 run_id=run.run_id, map_index=run.ti.map_index,
                                                 try_number=run.ti.try_number)
            run.ti.xcom_push(key="attempts", value=[a.to_dict() for a in attempts])  # for record, first
            return tasks.peers.conclude(attempts)

        @task(trigger_rule=TriggerRule.ALL_DONE)
        def finish() -> str:
            from cluster_doctor.airflow import runtime, tasks

            run = runtime.TaskRun.current()
            if run.discovered is None:
                return "no peer test"
            return tasks.peers.finish(PeerTests.from_xcom(run.pulled("peers.plan")), run.store, dag_id=run.dag_id,
                                      run_id=run.run_id)

        peer_tests = plan()
        bundles >> peer_tests
        peers_done = test.expand(peer_test=peer_tests) >> finish()

    def node_steps(bundle, steps: list, step_ids: list, weights: tuple) -> None:
        """A node's suites one after another (a step per suite, health first, each one pod in the pool), then
        finish_node. A step not planned on its node skips itself; one after a failed health check or a lost
        node is recorded skipped with that cause."""
        ops = [NodeValidationPodOperator(
            task_id=test,
            test_name=test,
            bundle=bundle,
            settings=SETTINGS,  # until the bundle is rendered: then the run's settings
            steps_before=step_ids[:i],
            pool=SETTINGS.pool,
            # execution_timeout: set by the operator from the run's settings (pending + suite budget + margin)
            retries=0,
            trigger_rule=TriggerRule.ALL_DONE if i else TriggerRule.ALL_SUCCESS,
            priority_weight=weights[i],
            weight_rule="absolute",
            map_index_template=STEP_LABEL,
        ) for i, test in enumerate(steps)]
        chain(*ops)
        ops[-1] >> finish_node(bundle, step_ids)

    # One instance per planned node, mapped over the bundles. Later steps outrank other nodes' first steps
    # for a pool slot (priority_weight), so a node that is free now finishes its bundle before the pool
    # moves on.
    @task_group(group_id="validate", tooltip="per node: its suites one after another, then finish_node")
    def validate(bundle):
        node_steps(bundle, STEPS, STEP_IDS, WEIGHTS.validate)

    validated = validate.expand(bundle=bundles)

    # The health sweep's bundles, after ship_suites (its suite code is reused).
    @task
    def ship_sweep() -> list:
        from cluster_doctor.airflow import runtime, tasks
        from cluster_doctor.domain.payloads import Plan

        run = runtime.TaskRun.current()
        return [b.to_xcom() for b in tasks.sweep_bundles(run.found, Plan.from_xcom(run.pulled("prioritize")),
                                                         run.core_v1, tasks.shipped(run.pulled("ship_suites")))]

    # Mapped over the swept nodes, beside validate: the same steps, each below every bundle's in the pool.
    @task_group(group_id="sweep", tooltip="health sweep of free nodes: their health suites, then finish_node")
    def sweep(bundle):
        node_steps(bundle, SWEEP_STEPS, SWEEP_STEP_IDS, WEIGHTS.sweep)

    swept = []
    if SWEEP_STEPS:  # none when gpu_health and ib_health are both off
        sweep_nodes = ship_sweep()
        bundles >> sweep_nodes
        swept = [sweep.expand(bundle=sweep_nodes)]
    recorded = record()
    [validated, *swept, peers_done] >> recorded

    # Opt-in (setting quarantine): label/taint nodes with confirmed failures; fails when its breaker opens.
    @task(multiple_outputs=False)
    def quarantine(recorded: dict) -> dict:
        from cluster_doctor.airflow import runtime, tasks

        run = runtime.TaskRun.current()
        return tasks.quarantine(run.found, run.store, run.core_v1, run_id=run.run_id).to_dict()

    # Opt-in (setting handoff_conn_id): new repeat offenders and confirmed failures needing drain_and_service
    # into the results DB's outbox, and the outbox posted to the ticketing webhook; what it does not take
    # waits for a later run. Runs whatever quarantine did (an open breaker fails quarantine, not the hand-off).
    @task(trigger_rule=TriggerRule.ALL_DONE, multiple_outputs=False)
    def handoff() -> dict:
        from cluster_doctor.airflow import runtime, tasks

        run = runtime.TaskRun.current()
        found = run.found_or_skip("discovery failed: no settings to hand off with")
        return tasks.handoff(found.settings, run.store).to_dict()

    # Opt-in (setting node_conditions): every GPU node's ClusterDoctorHealthy condition from its latest
    # verdicts, for kubectl describe node, node-problem-detector consumers and autoscalers' node repair.
    @task(multiple_outputs=False)
    def node_conditions(recorded: dict) -> dict:
        from cluster_doctor.airflow import runtime, tasks

        run = runtime.TaskRun.current()
        return tasks.node_conditions(run.found, run.store, run.core_v1).to_dict()

    # Opt-in (setting acceptance): a gated node (new, rebooted, back from quarantine) whose whole bundle just
    # passed loses the gate's taint now, not at the next read; a failed one keeps it (quarantine takes it).
    @task(multiple_outputs=False)
    def accept(recorded: dict) -> dict:
        from cluster_doctor.airflow import runtime, tasks

        run = runtime.TaskRun.current()
        report = tasks.signals.accept_after_run(run.found, run.store, run.core_v1, run_id=run.run_id)
        return report.to_dict() if report is not None else {"enabled": False}

    quarantine(recorded) >> handoff()
    node_conditions(recorded)
    accept(recorded)
    verdict(summarize(recorded))
