"""What the Airflow tasks' retry loops are tested with, without waiting: a clock that only its sleeps move,
and the error the Task SDK raises when the supervisor's calls to the execution API timed out."""

from __future__ import annotations


class FakeTime:
    """``clock`` and ``sleep`` for the code under test: each sleep is recorded and moves the clock."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def api_server_timed_out():
    """The Task SDK's error for a call to the execution API that timed out, the supervisor's own retries
    spent (as Airflow's supervisor builds it, execution_time/supervisor.py handle_requests)."""
    from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
    from airflow.sdk.execution_time.comms import ErrorResponse

    return AirflowRuntimeError(ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail={
        "status_code": None, "message": "timed out", "exception_type": "ReadTimeout"}))
