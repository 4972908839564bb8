"""Parsers against recorded and public tool outputs (fixtures/SOURCES.md says where each comes from)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_doctor_suites import parsers

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fx(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text()


# ---------------------------------------------------------------- fio
def test_fio_real_output_all_patterns():
    d = parsers.parse_fio(fx("fio", "fio-3.33_4patterns_direct_ok.json"))
    assert d["version"] == "fio-3.33"
    assert set(d["jobs"]) == {"seq_write", "seq_read", "rand_write", "rand_read"}
    raw = json.loads(fx("fio", "fio-3.33_4patterns_direct_ok.json"))
    for job in raw["jobs"]:
        side = "write" if "write" in job["jobname"] else "read"
        got = d["jobs"][job["jobname"]]
        assert got["error"] == 0
        assert got[side]["bw_mibps"] == pytest.approx(job[side]["bw_bytes"] / 2**20)
        assert got[side]["iops"] == pytest.approx(job[side]["iops"])
        assert got[side]["p99_ms"] == pytest.approx(job[side]["clat_ns"]["percentile"]["99.000000"] / 1e6)


def test_fio_per_job_error_is_reported():
    d = parsers.parse_fio(fx("fio", "fio-3.33_rand_write_job_error.json"))
    assert d["jobs"]["rand_write"]["error"] == 1
    assert d["jobs"]["seq_read"]["error"] == 0


def test_fio_text_around_the_json():
    text = fx("fio", "fio-3.33_enospc.stdout")  # real: fio prints notes before the JSON on ENOSPC
    assert text.startswith("fio: ENOSPC on laying out file")
    d = parsers.parse_fio(text)
    assert len(d["jobs"]) == 4 and d["jobs"]["seq_write"]["error"] == 28 and d["jobs"]["rand_read"]["error"] == 0


@pytest.mark.parametrize("text", ["", "fio: failed to parse job file\n", '{"jobs": "nope"}', "{ truncated"])
def test_fio_garbage_raises(text):
    with pytest.raises(ValueError):
        parsers.parse_fio(text)


def test_fio_clones_without_group_reporting_are_merged():
    def job(bw, p99, err=0):
        return {
            "jobname": "seq_read",
            "error": err,
            "read": {
                "bw_bytes": bw,
                "iops": bw / 2**20,
                "io_bytes": 10,
                "clat_ns": {"percentile": {"99.000000": p99}},
            },
        }

    d = parsers.parse_fio(json.dumps({"jobs": [job(2**20 * 100, 5e6), job(2**20 * 50, 9e6, err=5)]}))
    r = d["jobs"]["seq_read"]
    assert r["read"]["bw_mibps"] == pytest.approx(150)
    assert r["read"]["p99_ms"] == pytest.approx(9.0)
    assert r["error"] == 5


# ---------------------------------------------------------------- NCCL
def test_nccl_log_single_node_loopback_over_roce():
    """nv_peer_memory#78: one node, P2P and SHM disabled, NCCL 2.7.8 picks IB over 9 RoCE HCAs."""
    info = parsers.parse_nccl_log(fx("nccl", "all_reduce_perf_2xA100_p2p_shm_disabled_roce_nccl2.7.8_head.txt"))
    assert info["version"] == "2.7.8+cuda11.0" and info["networks"] == {"IB": 1}
    assert len(info["ib_devices"]) == 9 and set(info["ib_devices"].values()) == {"RoCE"}
    assert info["ib_devices"]["mlx5_bond_0:1"] == "RoCE"
    assert info["channel_count"] == 0 and info["ib_errors"] == [] and not info["ib_no_device"]


def test_nccl_log_ibext_plugin_with_sharp_hcas_and_p2p_channels():
    """nccl#1357 (2 x 8 H100): the SHARP plugin's IBext network, IB/SHARP ports, P2P/CUMEM inside a node."""
    info = parsers.parse_nccl_log(fx("nccl", "nccl_ibext_sharp_and_p2p_cumem_2x8xH100_nccl1357.txt"))
    assert info["networks"] == {"IBext": 3}
    assert info["ib_devices"] == {"mlx5_0:1": "IB", "mlx5_1:1": "IB", "mlx5_4:1": "IB", "mlx5_5:1": "IB"}
    assert info["transport_families"] == {"NET/IBext": 5, "P2P": 10} and info["gdr_channels"] == 5


def test_nccl_log_channels_with_bus_ids():
    """nccl#707: `Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA` (bus ids, no /N)."""
    info = parsers.parse_nccl_log(fx("nccl", "nccl_channels_net_ib_gdrdma_nccl707.txt"))
    assert info["transport_families"] == {"NET/IB": 12} and info["gdr_channels"] == 12


def test_nccl_log_ring_lines_of_old_nccl():
    """nccl#398 (NCCL 2.4): `Ring 00 : 15 -> 0 [send] via NET/Socket/0`; read as channels."""
    info = parsers.parse_nccl_log(fx("nccl", "nccl_ring_lines_p2p_ipc_net_socket_nccl398.txt"))
    assert info["transport_families"] == {"P2P": 15, "NET/Socket": 2}
    assert info["transports"]["NET/Socket/0"] == 2


@pytest.mark.parametrize(
    "fixture, version, ifaces, no_ib",
    [
        ("all_reduce_perf_socket_p2p_disabled_nccl2.16.5_head.txt", "2.16.5+cuda11.8", ["eth0", "virbr0"], False),
        ("all_reduce_perf_ib_no_device_socket_nccl2.21.5.txt", "2.21.5+cuda12.4", ["lo"], True),
    ],
)
def test_nccl_log_socket_network(fixture, version, ifaces, no_ib):
    info = parsers.parse_nccl_log(fx("nccl", fixture))
    assert info["version"] == version and set(info["networks"]) == {"Socket"}
    assert info["socket_interfaces"] == ifaces and info["ib_no_device"] is no_ib and info["ib_devices"] == {}
    assert info["warnings"] and info["ib_errors"] == []


@pytest.mark.parametrize(
    "fixture, n, text",
    [
        ("all_reduce_perf_ib_completion_status12_nccl1698.txt", 2, "with status=12 opcode=129"),
        ("all_reduce_perf_ib_completion_error4_nccl-tests24.txt", 1, "Got completion with error 4, opcode 1"),
    ],
)
def test_nccl_log_ib_completion_errors(fixture, n, text):
    info = parsers.parse_nccl_log(fx("nccl", fixture))
    assert len(info["ib_errors"]) == n and text in info["ib_errors"][0]


def test_nccl_tests_table_current_format():
    """A3 Mega, 16 x H100: the current layout (root, #wrong), 8 B .. 8 GiB, printed without NCCL INFO."""
    d = parsers.parse_nccl_tests(fx("nccl", "all_reduce_perf_16xH100_2nodes_a3mega.txt"))
    assert d["header"]["nGpus"] == 1 and d["header"]["validation"] == 1
    assert len(d["rows"]) == 31 and d["rows"][0]["size"] == 8 and d["rows"][-1]["size"] == 8 << 30
    last = d["rows"][-1]
    assert (last["oop_time_us"], last["oop_algbw"], last["oop_busbw"]) == (47535, 180.71, 338.82)
    assert last["ip_busbw"] == pytest.approx(337.35)
    assert all(r["oop_wrong"] == 0 and r["ip_wrong"] == 0 for r in d["rows"])
    assert d["oob"] == 0 and d["oob_ok"] is True and d["avg_busbw"] == pytest.approx(70.742)


def test_nccl_tests_old_error_column_is_a_max_error_within_tolerance():
    """nccl#1244 (NCCL 2.21.5, older nccl-tests): the `error` column holds the largest absolute error
    (4e-07 for a float sum). It is within the tool's tolerance: no wrong values."""
    d = parsers.parse_nccl_tests(fx("nccl", "all_reduce_perf_old_error_column_nccl1244.txt"))
    assert len(d["rows"]) == 8 and d["rows"][0]["size"] == 4 and d["rows"][-1]["size"] == 512
    assert all(r["oop_wrong"] == 0 and r["ip_wrong"] == 0 for r in d["rows"])
    assert d["oob"] is None and d["avg_busbw"] is None


@pytest.mark.parametrize(
    "dtype, err, wrong",
    [("float", "9e-06", 0), ("float", "2e-05", 1), ("half", "8e-03", 0), ("int32", "1e+00", 1)],
)
def test_nccl_tests_old_error_column_tolerance_per_type(dtype, err, wrong):
    row = f"        1024           256  {dtype:>8}     sum    47.44    0.02    0.02  {err}"
    row += "    53.56    0.02    0.02  0e+00\n"
    assert parsers.parse_nccl_tests(row)["rows"][0]["oop_wrong"] == wrong


def test_nccl_tests_wrong_values_as_the_tool_prints_them():
    bad = parsers.parse_nccl_tests(fx("nccl", "all_reduce_perf_wrong_values_derived.txt"))
    assert [r["oop_wrong"] for r in bad["rows"] if r["oop_wrong"]] == [4096]
    assert bad["oob"] == 4096 and bad["oob_ok"] is False


def test_nccl_tests_the_real_oci_sample():
    # one row as published by Oracle's OCI HPC tutorial (8x A100-SXM4-40GB, nccl-tests 2.x, NCCL 2.26)
    text = (
        "# nThread 1 nGpus 1 minBytes 10737418240 maxBytes 10737418240 step: 1048576(bytes) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
        " 10737418240    2684354560     float     sum      -1    80922  132.69  232.20      0"
        "    80948  132.65  232.13      0\n"
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 232.167 \n"
    )
    d = parsers.parse_nccl_tests(text)
    assert d["rows"][0]["oop_busbw"] == pytest.approx(232.20) and d["avg_busbw"] == pytest.approx(232.167)


@pytest.mark.parametrize(
    "name",
    [
        "all_reduce_perf_missing_libnccl_nccl-tests85.txt",
        "all_reduce_perf_ib_completion_status12_nccl1698.txt",
        "all_reduce_perf_ib_completion_error4_nccl-tests24.txt",  # table header, then the failure
        "all_reduce_perf_ib_no_device_socket_nccl2.21.5.txt",
    ],
)
def test_nccl_tests_without_rows_raises(name):
    with pytest.raises(ValueError):
        parsers.parse_nccl_tests(fx("nccl", name))


def test_nccl_tests_garbage_row_raises():
    with pytest.raises(ValueError):
        parsers.parse_nccl_tests(
            "     1048576        262144     float     sum      -1    x   4.14    7.25  0  1  1  1  0\n"
        )


# ---------------------------------------------------------------- nvidia-smi
def test_smi_xml_driver_590_two_gpus():
    """telegraf's dual RTX A5000 output of driver 590.44.01 (DTD v13): recovery action, no reset status,
    ECC off (counters N/A), idle Gen1 link, a llama-server process on each GPU."""
    d = parsers.parse_smi_xml(fx("smi", "nvidia-smi-q-x_590.44.01_2xRTX-A5000.xml"))
    assert d["driver"] == "590.44.01" and d["cuda"] == "13.1" and d["attached_gpus"] == 2
    g0, g1 = d["gpus"]
    assert (g0["pci_bus_id"], g1["pci_bus_id"]) == ("00000000:81:00.0", "00000000:C1:00.0")
    assert g0["name"] == "NVIDIA RTX A5000" and g0["recovery_action"] == "None" and g0["reset_required"] is None
    assert g0["ecc_enabled"] is False and g0["volatile_uncorrected"] is None
    assert (g0["remap_pending"], g0["remap_failure"], g0["remap_uncorrectable"]) == (False, False, 0)
    assert g0["throttle_active"] == ["gpu_idle"] and g0["pstate"] == 8
    assert (g0["pcie_gen"], g0["pcie_gen_max"], g0["pcie_width"], g0["pcie_width_max"]) == (1, 4, 16, 16)
    assert (g0["temp_c"], g0["slowdown_temp_c"], g1["temp_c"]) == (13, 95, 15)
    assert g0["fabric_state"] is None
    assert (g0["processes"], g0["process_mib"], g1["process_mib"]) == (1, 22430, 17246)


def test_smi_xml_driver_510_old_tags():
    """netdata's A100 output of driver 510: `clocks_throttle_reasons`, retired pages, MIG N/A counters."""
    g = parsers.parse_smi_xml(fx("smi", "nvidia-smi-q-x_510.47.03_A100-SXM4-40GB_mig.xml"))["gpus"][0]
    assert g["name"] == "NVIDIA A100-SXM4-40GB" and g["throttle_active"] == []
    assert g["volatile_uncorrected"] is None and g["recovery_action"] is None and g["pcie_width"] == 16


@pytest.mark.parametrize(
    "text",
    [
        "",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "<nvidia_smi_log><gpu>",
        '<?xml version="1.0" ?><other/>',
    ],
)
def test_smi_xml_garbage_raises(text):
    with pytest.raises(ValueError):
        parsers.parse_smi_xml(text)


def test_nvlink_status():
    links = parsers.parse_nvlink_status(fx("smi", "nvidia-smi-nvlink-s_2xA100-SXM4-80GB.txt"))
    assert sorted(links) == [0, 1] and links[1]["links"] == {i: 25.0 for i in range(12)}
    assert not links[1]["all_inactive"] and links[1]["unparsed"] == []
    down = parsers.parse_nvlink_status(fx("smi", "nvidia-smi-nvlink-s_V100-SXM2_links3_5_inactive.txt"))
    assert down[3]["links"] == {0: 25.781, 1: 25.781, 2: 25.781, 3: None, 4: 25.781, 5: None}
    with pytest.raises(ValueError):
        parsers.parse_nvlink_status("NVML: Unable to get the NvLink link state\n")


def test_nvlink_all_links_inactive_is_read_as_such_never_as_no_data():
    """B200 / R590 wording (leptonai/gpud#1085): no Link lines, the driver says all are inactive."""
    out = parsers.parse_nvlink_status(fx("smi", "nvidia-smi-nvlink-s_B200_all_inactive_gpud1085.txt"))
    assert out[2] == {"links": {}, "all_inactive": True, "unparsed": []}


def test_nvlink_line_the_parser_does_not_know_is_kept():
    text = fx("smi", "nvidia-smi-nvlink-s_2xA100-SXM4-80GB.txt").replace("Link 4: 25 GB/s", "Link 4: Degraded", 1)
    assert parsers.parse_nvlink_status(text)[0]["unparsed"] == ["Link 4: Degraded"]


# ---------------------------------------------------------------- DCGM
def test_dcgmi_3x_run_level_2_with_a_wrapped_warning():
    """DCGM 3.3.0 (nolebase note): PCIe `Fail - All` with a warning wrapped every 45 characters, both
    mid-word and at spaces; GPU Memory `Skip - All`."""
    d = parsers.parse_dcgmi_diag(fx("dcgm", "dcgmi-diag-r2_3.3.0_530.30.02_pcie_fail.txt"))
    assert d["version"] == "3.3.0" and d["driver"] == "530.30.02"
    tests = {t["name"]: t for t in d["tests"]}
    assert [t["status"] for t in d["tests"] if t["category"] == "Deployment"] == ["Pass"] * 9
    pcie = tests["PCIe"]
    assert pcie["category"] == "Integration" and pcie["status"] == "Fail" and pcie["gpus"] == {}
    assert pcie["messages"] == [
        "Warning: GPU 0 Error using CUDA API cudaDeviceGetByPCIBusId Check DCGM and system logs for errors. "
        "Reset GPU. Restart DCGM. Rerun diagnostics. 'system has unsupported display driver / cuda driver "
        "combination' for GPU 0, bus ID = 00000000:1B:00.0"
    ]
    assert tests["GPU Memory"]["status"] == "Skip"


def test_dcgmi_3x_failure_on_one_gpu():
    """go-dcgm#52 (DCGM 3.3.1): `Pass - GPU: 1` / `Fail - GPU: 0`, then warnings and infos."""
    d = parsers.parse_dcgmi_diag(fx("dcgm", "dcgmi-diag-r2_3.3.1_535.129.03_gpu_memory_fail.txt"))
    assert d["version"] == "3.3.1" and d["driver"] == "535.129.03"
    tests = {t["name"]: t for t in d["tests"]}
    mem = tests["GPU Memory"]
    assert mem["category"] == "Hardware" and mem["status"] == "Fail" and mem["gpus"] == {0: "Fail", 1: "Pass"}
    assert mem["messages"] == [
        "Warning: GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors. Reset GPU. "
        "Restart DCGM. Rerun diagnostics. Unable to create CUDA context: 'CUDA-capable device(s) is/are busy "
        "or unavailable'.",
        "Info: GPU 1 Allocated 15568304202 bytes (98.3%)",
    ]
    assert tests["Diagnostic"]["status"] == "Fail" and tests["Targeted Stress"]["category"] == "Stress"


def test_dcgmi_4x_layout():
    """DCGM#253 (DCGM 4.2.3): lower-case test names, one `GPUn: Pass` row per GPU."""
    d = parsers.parse_dcgmi_diag(fx("dcgm", "dcgmi-diag-r1_4.2.3_570.148.08_head.txt"))
    assert d["version"] == "4.2.3" and d["driver"] == "570.148.08"
    assert [(t["category"], t["name"], t["status"]) for t in d["tests"]] == [("Deployment", "software", "Pass")]
    assert d["tests"][0]["gpus"] == {0: "Pass", 1: "Pass", 2: "Pass", 3: "Pass"}


@pytest.mark.parametrize(
    "text",
    ["", fx("dcgm", "dcgmi_no_hostengine_3.3.0.txt"), "+----+\n| a | b |\n"],
)
def test_dcgmi_garbage_raises(text):
    with pytest.raises(ValueError):
        parsers.parse_dcgmi_diag(text)


NVVS_31 = "nvvs-json_3.1.0_8gpu_pass_dcgm-jsonresulttests.txt"  # DCGM 3 layout, 8 GPUs, all PASS
DCGM4_DIAG_EXCERPT = "dcgmi-diag-r4-j_4.x_8gpu_diagnostic_test_excerpt.txt"  # DCGM 4: one test object


def test_dcgmi_json_dcgm3_layout_nvvs_real_output():
    """NVIDIA's 'real output' of DCGM 3.1.0 (JsonResultTests.cpp): a note line before the document,
    `null` between the tests, upper-case PASS, `gpu_ids` "0,1,...,7" for the run-wide tests and one
    `gpu_ids` integer per GPU for `software`."""
    d = parsers.parse_dcgmi_diag_json(fx("dcgm", NVVS_31))
    assert d["version"] == "3.1.0" and d["driver"] is None
    assert [t["name"] for t in d["tests"]] == [
        "Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS-related Blocks",
        "Persistence Mode", "Environmental Variables", "Page Retirement/Row Remap", "Graphics Processes",
        "Inforom", "software",
    ]
    assert {t["category"] for t in d["tests"][:9]} == {"Deployment"} and d["tests"][9]["category"] == "Custom"
    assert all(t["status"] == "Pass" and t["messages"] == [] for t in d["tests"])
    assert all(t["gpus"] == {} for t in d["tests"][:9]), "a result for GPUs 0-7 at once is run-wide"
    assert d["tests"][9]["gpus"] == {g: "Pass" for g in range(8)}


def test_dcgmi_json_dcgm3_failure_on_one_gpu():
    """The same output with GPU 3's `software` result set to FAIL (one exact edit)."""
    text = fx("dcgm", NVVS_31)
    old = '"gpu_ids" : 3,\n\t\t\t\t\t\t\t\t"status" : "PASS"'
    assert text.count(old) == 1
    d = parsers.parse_dcgmi_diag_json(text.replace(old, old.replace("PASS", "FAIL")))
    sw = {t["name"]: t for t in d["tests"]}["software"]
    assert sw["status"] == "Fail" and sw["gpus"][3] == "Fail" and sw["gpus"][2] == "Pass"


def test_dcgmi_json_dcgm4_layout(h):
    """DCGM#215 (DCGM 4, 8 GPUs): `entity_group` GPU / `entity_id`, `info` lists, `test_summary`."""
    d = parsers.parse_dcgmi_diag_json(h.dcgm4_document(fx("dcgm", DCGM4_DIAG_EXCERPT)))
    assert d["version"] is None and d["driver"] is None
    (t,) = d["tests"]
    assert (t["category"], t["name"], t["status"]) == ("Hardware", "diagnostic", "Pass")
    assert t["gpus"] == {g: "Pass" for g in range(8)}
    assert "Info: GPU 1 calculated at approximately 859.08 gigaflops during this test" in t["messages"]
    assert "Info: Running with precisions: FP64 1, FP32 1, FP16 1" in t["messages"]
    assert not any(m.startswith("Warning") for m in t["messages"])
    assert parsers.parse_dcgmi_diag_json(h.dcgm4_document(fx("dcgm", DCGM4_DIAG_EXCERPT), "4.1.1"))["version"] == "4.1.1"


def test_dcgmi_json_dcgm4_test_summary_decides_and_a_failing_gpu_fails_the_test(h):
    text = h.dcgm4_document(fx("dcgm", DCGM4_DIAG_EXCERPT))
    old = '"entity_id" : 5,\n                                                                "status" : "Pass"'
    assert text.count(old) == 1
    d = parsers.parse_dcgmi_diag_json(text.replace(old, old.replace("Pass", "Fail")))
    t = d["tests"][0]
    assert t["status"] == "Fail" and t["gpus"][5] == "Fail" and t["gpus"][4] == "Pass"
    summary = '"test_summary" :\n                                                {\n                                                        "status" : "Pass"'
    assert text.count(summary) == 1
    d = parsers.parse_dcgmi_diag_json(text.replace(summary, summary.replace("Pass", "Skip")))
    assert d["tests"][0]["status"] == "Skip"


def test_dcgmi_json_ignores_unknown_keys(h):
    doc = json.loads(h.dcgm4_document(fx("dcgm", DCGM4_DIAG_EXCERPT)))
    doc["something_new"] = {"x": [1, 2]}
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["new_field"] = "?"
    d = parsers.parse_dcgmi_diag_json(json.dumps(doc))
    assert d["tests"][0]["gpus"][0] == "Pass"


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "no JSON document"),
        ("PARSE ERROR: Argument: -j\n             Couldn't find match for argument\n", "no JSON document"),
        (fx("dcgm", "dcgmi_no_hostengine_3.3.0.txt"), "no JSON document"),
        (fx("dcgm", "dcgmi-diag-r1_4.2.3_570.148.08_head.txt"), "no JSON document"),  # the table is not JSON
        ('{"jobs": []}', "DCGM Diagnostic"),
        ('{"DCGM GPU Diagnostic": {"test_categories": [], "version": "3.3.1"}}', "no test results"),
        # dcgmi's HelperDisplayFailureMessage document: version and runtime_error only
        ('{"DCGM GPU Diagnostic": {"version": "3.3.1", "runtime_error": "Error: Diagnostic could not be '
         'run while DCGM is paused."}}', "did not run: Error: Diagnostic could not be run while DCGM is paused."),
    ],
)
def test_dcgmi_json_garbage_raises(text, why):
    with pytest.raises(ValueError, match=why.replace(".", r"\.")):
        parsers.parse_dcgmi_diag_json(text)


def test_sources_md_names_every_fixture():
    """Every tool-output fixture has its origin in SOURCES.md (recorded, public or derived); a new file
    without a line there fails, and no fixture is left that was written by hand."""
    import fnmatch
    import re

    text = (FIXTURES / "SOURCES.md").read_text()
    named = set()
    for cell in re.findall(r"^\| (.+?) \|", text, flags=re.M):
        for ref in re.findall(r"`([^`]+)`", cell):
            base = ref.split(", ")[0]
            named.add(base)
            if ref.startswith("."):  # `.stderr` after a `.stdout` name
                continue
    files = [p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*") if p.is_file()]
    files = [f for f in files if f != "SOURCES.md" and not f.startswith("fio/jobs/")]
    missing = []
    for f in files:
        stem = f.rsplit(".", 1)[0]
        if not any(fnmatch.fnmatch(f, pat) or pat == f or pat.rsplit(".", 1)[0] == stem for pat in named):
            missing.append(f)
    assert not missing, missing
    assert "Out of bounds values : 4096 FAILED" in fx("nccl", "all_reduce_perf_wrong_values_derived.txt")
    assert "**reconstructed**" not in text, "a hand-written tool output is still listed"
