"""What each task of the continuous_validation DAG does: one module per DAG stage, named for it, in graph order
(discover → load_latest, reserve → prioritize → ship_suites → finish_node → record → summarize → verdict;
quarantine beside them). The DAG file only wires these together.

Every function takes and returns the typed payloads of ``cluster_doctor.domain.payloads``; the DAG
file turns them into XComs and back (``to_xcom`` / ``from_xcom``). Each stage's function is re-exported
here under the stage's name (``tasks.discover(...)``), so the package attribute is the function; a
stage's helpers are imported from its module (``from cluster_doctor.airflow.tasks.prioritize import ...``).
"""

from cluster_doctor.airflow.tasks._common import WAIT_NOTE_S, log, waited_line
from cluster_doctor.airflow.tasks.discover import discover
from cluster_doctor.airflow.tasks.load_latest import load_latest
from cluster_doctor.airflow.tasks.reserve import reserve
from cluster_doctor.airflow.tasks.prioritize import prioritize
from cluster_doctor.airflow.tasks.ship_suites import ship_suites, sweep_bundles
from cluster_doctor.airflow.tasks.finish_node import finish_node
from cluster_doctor.airflow.tasks.record import record
from cluster_doctor.airflow.tasks.summarize import spool_state, summarize, unrecorded
from cluster_doctor.airflow.tasks.verdict import verdict
from cluster_doctor.airflow.tasks.quarantine import quarantine

__all__ = ["WAIT_NOTE_S", "discover", "finish_node", "load_latest", "log", "prioritize", "quarantine", "record",
           "reserve", "ship_suites", "spool_state", "summarize", "sweep_bundles", "unrecorded", "verdict",
           "waited_line"]
