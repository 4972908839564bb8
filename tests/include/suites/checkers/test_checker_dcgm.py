"""checkers/dcgm.py: dcgmi's exit codes read as DCGM's dcgmReturn_t (dcgm_structs.h)."""

from __future__ import annotations

from cluster_doctor_suites import parsers
from cluster_doctor_suites.checkers import dcgm


def _run(h, fixture, rc):
    r = dcgm.DcgmRun(1, rc=rc, parsed=parsers.parse_dcgmi_diag(h.fx("dcgm", fixture)))
    return {(c.name, c.device): c for c in dcgm.to_checks(r)}


def test_exit_codes_are_dcgm_return_values():
    assert dcgm.dcgm_status(226) == -30 and dcgm.status_name(226) == "DCGM_ST_NVVS_ERROR"
    assert dcgm.status_name(205) == "DCGM_ST_NVVS_ISOLATE_ERROR" and dcgm.status_name(235) == "DCGM_ST_CONNECTION_NOT_VALID"


def test_exit_226_without_a_failing_test_is_a_failure_not_a_pass(h):
    """A table that passes, from a dcgmi that exited DCGM_ST_NVVS_ERROR: the tool says it found an
    error, so the node does not pass."""
    got = _run(h, "dcgmi-diag-r1_4.2.3_570.148.08_head.txt", 226)
    assert got[("dcgm_diag", None)].status == "fail" and got[("dcgm_diag", None)].code == "DCGM_DIAG_FAIL"


def test_isolate_error_asks_for_service(h):
    got = _run(h, "dcgmi-diag-r2_3.3.1_535.129.03_gpu_memory_fail.txt", 205)
    mem = got[("dcgm_gpu_memory", "cuda:0")]
    assert mem.code == "DCGM_DIAG_ISOLATE" and mem.action == "drain_and_service"
    assert got[("dcgm_diag", None)].action == "drain_and_service"


def test_clean_run_passes_with_exit_0(h):
    got = _run(h, "dcgmi-diag-r1_4.2.3_570.148.08_head.txt", 0)
    assert got[("dcgm_diag", None)].status == "pass"


def test_unknown_test_status_is_never_a_pass():
    r = dcgm.DcgmRun(1, rc=0, parsed={"tests": [{"category": "Deployment", "name": "x", "status": "Maybe",
                                                 "gpus": {}, "messages": []}]})
    got = {c.name: c for c in dcgm.to_checks(r)}
    assert got["dcgm_x"].status == "error" and got["dcgm_diag"].status == "skip"


def test_missing_dcgmi_is_a_visible_not_run():
    [c] = dcgm.to_checks(dcgm.DcgmRun(1, not_run="dcgmi not installed"))
    assert (c.name, c.status, c.code) == ("dcgm_diag", "skip", "DCGM_UNAVAILABLE")


def test_per_gpu_results_are_matched_against_the_gpus_found(h):
    """DCGM#253's table (GPUs 0-3, DCGM 4.2.3): on a node whose suite found GPUs 0-3 every GPU is
    covered; with GPU 0's row left out GPU 0 was not diagnosed (not run, and so is dcgm_diag); on a
    node that has only GPUs 0-1, dcgmi's GPUs 2 and 3 are reported, not silently taken as this pod's."""
    table = h.fx("dcgm", "dcgmi-diag-r1_4.2.3_570.148.08_head.txt")
    parsed = parsers.parse_dcgmi_diag(table)
    whole = {(c.name, c.device): c for c in dcgm.to_checks(dcgm.DcgmRun(1, rc=0, parsed=parsed), [0, 1, 2, 3])}
    assert whole[("dcgm_gpu_coverage", None)].status == "pass" and whole[("dcgm_diag", None)].status == "pass"
    row = next(line for line in table.splitlines(keepends=True) if "GPU0: Pass" in line)
    partial = parsers.parse_dcgmi_diag(table.replace(row, ""))
    got = {(c.name, c.device): c for c in dcgm.to_checks(dcgm.DcgmRun(1, rc=0, parsed=partial), [0, 1, 2, 3])}
    assert got[("dcgm_gpu_coverage", "cuda:0")].code == "DCGM_GPU_NOT_COVERED"
    assert got[("dcgm_diag", None)].status == "skip"
    fewer = {(c.name, c.device): c for c in dcgm.to_checks(dcgm.DcgmRun(1, rc=0, parsed=parsed), [0, 1])}
    unmatched = fewer[("dcgm_gpu_coverage", None)]
    assert unmatched.status == "warn" and unmatched.code == "DCGM_GPU_UNMATCHED" and "2, 3" in unmatched.message
    # a table without per-GPU rows (DCGM 3 Deployment tests are run-wide): nothing to match
    flat = parsers.parse_dcgmi_diag(h.fx("dcgm", "dcgmi-diag-r3_3.0.4_deployment_pass.txt"))
    assert not [c for c in dcgm.to_checks(dcgm.DcgmRun(3, rc=0, parsed=flat), [0]) if c.name == "dcgm_gpu_coverage"]
