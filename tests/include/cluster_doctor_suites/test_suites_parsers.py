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
def test_nccl_log_ib_loopback():
    info = parsers.parse_nccl_log(fx("nccl", "all_reduce_perf_8xH100_ib_loopback.txt"))
    assert info["version"] == "2.21.5+cuda12.4"
    assert info["networks"] == {"IB": 8}
    assert set(info["transport_families"]) == {"NET/IB"}
    assert info["channel_count"] == 32 and info["gdr_channels"] == 32
    assert len(info["ib_devices"]) == 8 and info["ib_devices"]["mlx5_0:1"] == "IB"
    assert info["ib_errors"] == []


def test_nccl_log_socket_fallback():
    info = parsers.parse_nccl_log(fx("nccl", "all_reduce_perf_8xH100_socket_fallback.txt"))
    assert "Socket" in info["networks"] and info["ib_no_device"]
    assert set(info["transport_families"]) == {"NET/Socket"}
    assert info["socket_interfaces"] == ["eth0", "eth1"]


def test_nccl_log_ib_completion_error():
    info = parsers.parse_nccl_log(fx("nccl", "all_reduce_perf_8xH100_ib_completion_error.txt"))
    assert len(info["ib_errors"]) == 1 and "status=12" in info["ib_errors"][0]


def test_nccl_log_plugin_names_and_warn_lines():
    text = (
        "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB bond0:10.0.0.1<0>\n"
        "h:1:2 [0] NCCL INFO Using network IBext_v8\n"
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IBext_v8/0/GDRDMA/Shared\n"
        "h:1:2 [0] misc/socket.cc:484 NCCL WARN Using network Socket\n"
    )  # WARN lines are not decisions
    info = parsers.parse_nccl_log(text)
    assert info["networks"] == {"IBext_v8": 1}
    assert info["transport_families"] == {"NET/IBext_v8": 1}
    assert info["ib_devices"] == {"mlx5_0:1": "RoCE", "mlx5_1:1": "RoCE"}


def test_nccl_tests_table_current_format():
    d = parsers.parse_nccl_tests(fx("nccl", "all_reduce_perf_8xH100_ib_loopback.txt"))
    assert d["header"]["nGpus"] == 8 and d["header"]["validation"] == 1
    assert len(d["rows"]) == 13 and d["rows"][0]["size"] == 1 << 20 and d["rows"][-1]["size"] == 1 << 32
    assert d["rows"][-1]["oop_busbw"] == pytest.approx(46.10)
    assert all(r["oop_wrong"] == 0 and r["ip_wrong"] == 0 for r in d["rows"])
    assert d["oob"] == 0 and d["oob_ok"] is True and d["avg_busbw"] == pytest.approx(34.3485)


def test_nccl_tests_table_old_format_and_wrong_values():
    old = parsers.parse_nccl_tests(fx("nccl", "all_reduce_perf_old_format_8xH100.txt"))
    assert len(old["rows"]) == 13 and old["rows"][-1]["oop_busbw"] == pytest.approx(46.10)
    assert old["rows"][0]["oop_wrong"] == 0
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
    "name", ["all_reduce_perf_missing_libnccl.txt", "all_reduce_perf_8xH100_ib_completion_error.txt"]
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
def test_smi_xml_healthy_h100():
    d = parsers.parse_smi_xml(fx("smi", "nvidia-smi-q-x_8xH100_healthy.xml"))
    assert d["driver"] == "550.90.07" and d["cuda"] == "12.4" and d["attached_gpus"] == 8
    g = d["gpus"][0]
    assert g["name"] == "NVIDIA H100 80GB HBM3" and g["pci_bus_id"] == "00000000:18:00.0"
    assert g["ecc_enabled"] is True and g["volatile_uncorrected"] == 0 and g["aggregate_uncorrected"] == 0
    assert g["remap_pending"] is False and g["remap_failure"] is False and g["retired_pending"] is None
    assert g["throttle_active"] == ["gpu_idle"]
    assert (g["pcie_gen"], g["pcie_gen_max"], g["pcie_width"], g["pcie_width_max"]) == (5, 5, 16, 16)
    assert (g["temp_c"], g["slowdown_temp_c"], g["pstate"]) == (33, 89, 0)
    assert (g["fabric_state"], g["fabric_status"], g["recovery_action"]) == ("Completed", "Success", "None")


def test_smi_xml_faulty_h100():
    gpus = parsers.parse_smi_xml(fx("smi", "nvidia-smi-q-x_8xH100_faulty.xml"))["gpus"]
    assert gpus[2]["volatile_uncorrected"] == 2 and gpus[2]["remap_pending"] is True
    assert gpus[3]["throttle_active"] == ["hw_power_brake_slowdown", "hw_slowdown"]
    assert gpus[4]["pcie_width"] == 8
    assert gpus[5]["fabric_state"] == "In Progress"
    assert gpus[6]["recovery_action"] == "Reset"
    assert gpus[7]["processes"] == 1 and gpus[7]["process_mib"] == 30450


def test_smi_xml_old_tags():
    xml = (
        '<nvidia_smi_log><driver_version>470.57.02</driver_version><gpu id="00000000:07:00.0">'
        "<product_name>Tesla V100-SXM2-32GB</product_name><clocks_throttle_reasons>"
        "<clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>"
        "</clocks_throttle_reasons><ecc_errors><volatile><double_bit><total>3</total></double_bit></volatile>"
        "</ecc_errors><retired_pages><pending_retirement>Yes</pending_retirement><double_bit_retirement>"
        "<retired_count>4</retired_count></double_bit_retirement></retired_pages></gpu></nvidia_smi_log>"
    )
    g = parsers.parse_smi_xml("warning: something on stdout first\n" + xml)["gpus"][0]
    assert g["throttle_active"] == ["hw_slowdown"] and g["volatile_uncorrected"] == 3
    assert g["retired_pending"] is True and g["retired_dbe"] == 4


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
    links = parsers.parse_nvlink_status(fx("smi", "nvidia-smi-nvlink-s_8xH100_gpu1_link5_down.txt"))
    assert len(links) == 8 and len(links[0]) == 18
    assert links[1][5] is None and links[1][4] == pytest.approx(26.562)
    with pytest.raises(ValueError):
        parsers.parse_nvlink_status("NVML: Unable to get the NvLink link state\n")


# ---------------------------------------------------------------- DCGM
def test_dcgmi_3x_pass():
    d = parsers.parse_dcgmi_diag(fx("dcgm", "dcgmi-diag-r1_3.3.5_pass.txt"))
    assert d["version"] == "3.3.5" and d["driver"] == "550.90.07"
    assert len(d["tests"]) == 9 and all(t["status"] == "Pass" for t in d["tests"])
    assert {t["category"] for t in d["tests"]} == {"Deployment"}


def test_dcgmi_3x_failure_with_wrapped_warning():
    tests = {
        t["name"]: t
        for t in parsers.parse_dcgmi_diag(fx("dcgm", "dcgmi-diag-r1_3.3.5_row_remap_fail.txt"))["tests"]
    }
    t = tests["Page Retirement/Row Remap"]
    assert t["status"] == "Fail" and t["gpus"][2] == "Fail" and t["gpus"][0] == "Pass" and len(t["gpus"]) == 8
    assert t["messages"] == [
        "Warning: GPU 2 had uncorrectable memory errors and row remapping is pending. "
        "Run nvidia-smi -r to reset the GPU."
    ]
    assert tests["Persistence Mode"]["status"] == "Pass" and tests["Persistence Mode"]["messages"][
        0
    ].startswith("Info:")


def test_dcgmi_4x_failure():
    d = parsers.parse_dcgmi_diag(fx("dcgm", "dcgmi-diag-r1_4.2.3_memory_fail.txt"))
    tests = {t["name"]: t for t in d["tests"]}
    assert d["version"] == "4.2.3"
    assert tests["software"]["status"] == "Pass" and len(tests["software"]["gpus"]) == 4
    mem = tests["memory"]
    assert mem["category"] == "Hardware" and mem["status"] == "Fail"
    assert mem["gpus"] == {0: "Pass", 1: "Fail", 2: "Pass", 3: "Pass"}
    assert "DBE occurred on GPU 1 during the memory test" in mem["messages"][0]


@pytest.mark.parametrize(
    "text",
    ["", "Error: unable to establish a connection to the specified host: localhost\n", "+----+\n| a | b |\n"],
)
def test_dcgmi_garbage_raises(text):
    with pytest.raises(ValueError):
        parsers.parse_dcgmi_diag(text)


# ---------------------------------------------------------------- kernel log
def test_xids_from_dmesg():
    ev = parsers.parse_xids(fx("kernel", "dmesg_xids_derived.txt"))
    assert [e["xid"] for e in ev] == [13, 13, 109, 94, 79]
    assert ev[-1]["pci"] == "0000:db:00" and ev[-1]["uptime_s"] == pytest.approx(86400.000101)
    assert parsers.parse_xids(fx("kernel", "dmesg_clean_6.18_firecracker.txt")) == []


@pytest.mark.parametrize(
    "fixture, want",
    [
        ("dmesg_ctime_xid13_xid109.txt", [(13, "0000:cb:00"), (13, "0000:cb:00"), (13, "0000:cb:00"), (109, "0000:cb:00")]),
        ("journal_xid45_after_xid149_590.48.01.txt", [(45, p) for p in (
            "0000:dc:00", "0000:ed:00", "0000:ba:00", "0000:97:00", "0000:dc:00", "0000:ba:00", "0000:ed:00")]),
        ("dmesg_fallen_off_bus_570.158.01.txt", [(None, "0000:b3:00")]),
        ("dmesg_fallen_off_bus_one_line.txt", [(None, "0000:01:00"), (None, "0000:01:00")]),
    ],
)
def test_xids_in_genuine_kernel_logs(fixture, want):
    ev = parsers.parse_xids(fx("kernel", fixture))
    assert [(e["xid"], e["pci"]) for e in ev] == want
    assert all((e["kind"] == "fallen_off_bus") == (e["xid"] is None) for e in ev)


def test_short_pci():
    assert parsers.short_pci("00000000:DB:00.0") == "0000:db:00"
    assert parsers.short_pci("0000:1b:00.0") == "0000:1b:00"
    assert parsers.short_pci(None) is None


def test_sources_md_names_every_fixture():
    """Every tool-output fixture has its origin in SOURCES.md (recorded, public, derived, or marked
    reconstructed); a new file without a line there fails."""
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
