"""gpu_health: CPU mode for real; the GPU paths through public nvidia-smi / dcgmi / dmesg outputs
(fixtures/SOURCES.md) printed by fake tools, and a fake NVML module (fake_nvml.py): thermal throttling
under load judged across two runs that share the results directory."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from cluster_doctor_suites import gpu_health
from tests.support.fake_nvml import FakeNVML

XML_590 = "nvidia-smi-q-x_590.44.01_2xRTX-A5000.xml"  # driver 590.44.01, 2 GPUs: 81:00.0 and C1:00.0
NVLINK_2 = "nvidia-smi-nvlink-s_2xA100-SXM4-80GB.txt"  # 2 GPUs x 12 links


@pytest.fixture
def tools(fake_tool, h, tmp_path):
    """Fake nvidia-smi / dmesg / dcgmi printing fixture files. `xml` may also be the text itself
    (a derived output written by the test)."""

    def make(
        xml=XML_590,
        nvlink=NVLINK_2,
        dmesg="dmesg_clean_6.18_firecracker.txt",
        dmesg_rc=0,
        dcgm=None,
        smi_rc=0,
        dcgm_rc=0,
    ):
        F = h.FIXTURES
        xml_path, nvlink_path = F / "smi" / xml, F / "smi" / nvlink
        if "\n" in xml:
            xml_path = tmp_path / "smi-derived.xml"
            xml_path.write_text(xml)
        if "\n" in nvlink:
            nvlink_path = tmp_path / "nvlink-derived.txt"
            nvlink_path.write_text(nvlink)
        smi = fake_tool(
            "nvidia-smi",
            f"""case "$1" in
  -q) cat "{xml_path}"; exit {smi_rc} ;;
  nvlink) cat "{nvlink_path}" ;;
  *) exit 2 ;;
esac""",
        )
        # util-linux dmesg: the log on stdout, or its error on stderr with exit code 1
        stream = ">&2" if dmesg_rc else ""
        dm = fake_tool("dmesg", f'cat "{F / "kernel" / dmesg}" {stream}; exit {dmesg_rc}')
        args = ["--source", "nvidia-smi", "--nvidia-smi", str(smi), "--dmesg", str(dm)]
        if dcgm:
            dcgm_path = F / "dcgm" / dcgm
            if "\n" in dcgm:
                dcgm_path = tmp_path / "dcgm-derived.txt"
                dcgm_path.write_text(dcgm)
            args += ["--dcgmi", str(fake_tool("dcgmi", f'cat "{dcgm_path}"; exit {dcgm_rc}'))]
        else:
            args += ["--dcgmi", "dcgmi-not-installed"]
        return args

    return make


def by_name(ns, name):
    return {c["device"]: c for c in ns.result["checks"] if c["name"] == name}


def derive(text: str, gpu: int | None, old: str, new: str) -> str:
    """One exact edit of a public output, in the block of GPU `gpu` (None: the whole text); the
    fragment must be there, so an edit can never silently miss."""
    if gpu is None:
        assert old in text, old
        return text.replace(old, new, 1)
    head, *blocks = text.split("<gpu id=")
    assert old in blocks[gpu], (gpu, old)
    blocks[gpu] = blocks[gpu].replace(old, new, 1)
    return "<gpu id=".join([head, *blocks])


def test_cpu_mode_passes(run_cli, h):
    ns = run_cli("gpu_health", "--device", "cpu")
    h.check_artifacts(ns, status="pass", suite="gpu_health")
    checks = {c["name"]: c["status"] for c in ns.result["checks"]}
    assert checks["gpu_count"] == "pass"
    assert checks["xid"] in ("pass", "skip")  # skip where the kernel log is not readable
    # every GPU check appears, as not run: CPU mode has no GPU state (never a silent pass)
    for name in gpu_health.GPU_CHECKS + ("dcgm_diag",):
        assert checks[name] == "skip", name
    assert ns.summary["incomplete"] is True


def test_the_speed_probe_runs_only_when_asked_and_reports_its_figures(run_cli, h):
    quiet = run_cli("gpu_health", "--device", "cpu")
    assert "probe_gemm_tflops_min" not in quiet.summary["metrics"]  # not asked: the orchestrator schedules it
    assert quiet.result["environment"]["speed_probe"]["seconds"] == 0
    ns = run_cli("gpu_health", "--device", "cpu", env={"CLUSTER_DOCTOR_PROBE_SECONDS": "0.1"})
    h.check_artifacts(ns, status="pass", suite="gpu_health")
    checks = {(c["name"], c.get("device")): c for c in ns.result["checks"]}
    for name in ("probe_gemm_tflops", "probe_hbm_gbps", "probe_gemm_result", "probe_membw_result"):
        assert checks[(name, "cpu:0")]["status"] == "pass", name
    figures = ns.summary["metrics"]  # the two figures the orchestrator judges against the fleet
    assert figures["probe_gemm_tflops_min"] > 0 and figures["probe_hbm_gbps_min"] > 0
    assert ns.result["environment"]["speed_probe"]["dtype"] == "fp32"


def test_a_probe_below_its_floor_fails_with_its_code_and_action(run_cli, h, tmp_path):
    import yaml

    data = yaml.safe_load((Path(gpu_health.__file__).parent / "baselines.yaml").read_text())
    data["models"]["cpu"]["metrics"]["probe_gemm_tflops"]["value"] = 1e6  # no CPU reaches an exaflop
    path = tmp_path / "baselines.yaml"
    path.write_text(yaml.safe_dump(data))
    ns = run_cli("gpu_health", "--device", "cpu", "--probe-seconds", "0.1", "--baselines", str(path))
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    [slow] = [c for c in ns.result["checks"] if c["name"] == "probe_gemm_tflops"]
    assert (slow["status"], slow["code"], slow["action"]) == ("fail", "PROBE_GEMM_SLOW", "drain_and_service")


def test_no_gpu_visible_with_expected_8_fails(run_cli, h):
    ns = run_cli(
        "gpu_health", "--device", "cuda", "--expected-gpus", "8", "--nvidia-smi", "nvidia-smi-not-here"
    )
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    assert ns.summary["reason"].startswith("gpu_count: expected 8 GPUs, found 0")


def test_cuda_mode_without_expectation_still_needs_a_gpu(run_cli, h):
    ns = run_cli("gpu_health", "--device", "cuda", "--nvidia-smi", "nvidia-smi-not-here")
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    assert "expected at least 1 GPU, found 0" in ns.summary["reason"]


def test_healthy_node_of_driver_590_passes_and_says_what_it_could_not_check(run_cli, tools, h):
    """The public R590 output: idle GPUs (Gen1 at P8), recovery action None, ECC switched off (its
    counters N/A: a visible skip, not a pass), one llama-server left on each GPU (a warning)."""
    ns = run_cli("gpu_health", "--expected-gpus", "2", *tools())
    h.check_artifacts(ns, status="pass", suite="gpu_health")
    env = ns.result["environment"]
    assert env["driver"] == "590.44.01" and env["cuda"] == "13.1" and env["gpu_count"] == 2
    assert env["gpu_model"] == "NVIDIA RTX A5000" and env["baseline"] is None
    assert any("unknown GPU model 'NVIDIA RTX A5000'" in w for w in ns.result["warnings"])
    healthy = ("clock_throttle", "pcie_width", "pcie_gen", "row_remap", "recovery_action", "nvlink", "temperature")
    for name in healthy:
        got = by_name(ns, name)
        assert sorted(got) == ["cuda:0", "cuda:1"] and {c["status"] for c in got.values()} == {"pass"}, name
    assert "PCIe Gen1 at idle (P8), link capable of Gen4, expected Gen4" in by_name(ns, "pcie_gen")["cuda:0"]["message"]
    assert by_name(ns, "nvlink")["cuda:1"]["value"] == 12
    ecc = by_name(ns, "ecc_uncorrected_volatile")
    assert {c["status"] for c in ecc.values()} == {"skip"} and "ECC is disabled" in ecc["cuda:0"]["message"]
    left = by_name(ns, "leftover_processes")
    assert left["cuda:0"]["status"] == "warn" and "22430 MiB" in left["cuda:0"]["message"]
    # 2x ECC off, 2x the thermal violation counter (NVML only), dcgmi not installed, no baseline for the model
    assert ns.summary["incomplete"] is True and ns.summary["reason"].startswith("pass, 6 check(s) could not run")
    assert by_name(ns, "baseline")[None]["code"] == "BASELINE_MISSING"
    # ECC off on a GPU with ECC memory (the driver reports the mode): a warning, model known or not
    assert {c["code"] for c in by_name(ns, "ecc_mode").values()} == {"ECC_DISABLED"}
    thermal = by_name(ns, "thermal_violation")
    assert sorted(thermal) == ["cuda:0", "cuda:1"]
    assert {c["code"] for c in thermal.values()} == {"THERMAL_VIOLATION_UNAVAILABLE"}
    assert "came from nvidia-smi" in thermal["cuda:0"]["message"] and thermal["cuda:0"]["status"] == "skip"
    assert by_name(ns, "dcgm_diag")[None]["code"] == "DCGM_UNAVAILABLE"  # dcgmi not installed: visible
    assert "dcgmi-not-installed not installed" in by_name(ns, "dcgm_diag")[None]["message"]
    assert by_name(ns, "xid")[None]["status"] == "pass" and by_name(ns, "driver_log")[None]["status"] == "pass"


def test_faulty_node_names_every_bad_gpu(run_cli, tools, h):
    """Faults written into the public R590 output the way nvidia-smi prints them: a hardware slowdown
    and a x8 link on GPU 0, the driver's recovery action `Reset` (the value nvidia-smi printed for a
    GPU in ERR state, utkuozdemir/nvidia_gpu_exporter#393) on GPU 1, and link 5 of GPU 1 `<inactive>`
    (as in Azure/azhpc-diagnostics#73)."""
    xml = h.fx("smi", XML_590)
    xml = derive(xml, 0, "_hw_slowdown>Not Active</clocks_event", "_hw_slowdown>Active</clocks_event")
    xml = derive(xml, 0, "<current_link_width>16x<", "<current_link_width>8x<")
    xml = derive(xml, 1, "<gpu_recovery_action>None<", "<gpu_recovery_action>Reset<")
    nvlink = h.fx("smi", NVLINK_2)
    head, gpu1 = nvlink.split("GPU 1:")
    nvlink = head + "GPU 1:" + derive(gpu1, None, "Link 5: 25 GB/s", "Link 5: <inactive>")
    ns = run_cli("gpu_health", "--expected-gpus", "2", *tools(xml=xml, nvlink=nvlink))
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    fails = {(c["name"], c["device"]) for c in h.failing(ns)}
    assert fails == {
        ("clock_throttle", "cuda:0"),
        ("pcie_width", "cuda:0"),
        ("recovery_action", "cuda:1"),
        ("nvlink", "cuda:1"),
    }
    assert by_name(ns, "pcie_width")["cuda:0"]["value"] == 8
    assert "hw_slowdown while idle (00000000:81:00.0)" in by_name(ns, "clock_throttle")["cuda:0"]["message"]
    rec, nvl = by_name(ns, "recovery_action")["cuda:1"], by_name(ns, "nvlink")["cuda:1"]
    assert "driver requests recovery action 'Reset' (00000000:C1:00.0)" in rec["message"]
    assert "link(s) 5 inactive; 11 active, expected 12 (no expectation: the best GPU of this node)" in nvl["message"]
    codes = {c["code"] for c in h.failing(ns)}
    assert codes == {"CLOCK_THROTTLE_HW", "PCIE_WIDTH_DEGRADED", "GPU_RECOVERY_ACTION", "NVLINK_DOWN"}
    assert ns.summary["check_counts"]["fail"] == 4 and ns.summary["checks"][0]["status"] == "fail"
    assert rec["action"] == "reset_gpu" and ns.summary["action"] == "drain_and_service"  # HW slowdown


def test_driver_not_loaded_is_a_failure(run_cli, tools, h):
    ns = run_cli(
        "gpu_health", "--expected-gpus", "8", *tools(xml="nvidia-smi_driver_not_loaded.txt", smi_rc=9)
    )
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    q = h.failing(ns, "gpu_query")
    assert q and "couldn't communicate with the NVIDIA driver" in q[0]["message"]
    assert "exit 9 (the NVIDIA driver is not loaded)" in q[0]["message"] and q[0]["code"] == "GPU_DRIVER_UNREACHABLE"


def test_garbage_nvidia_smi_output_is_an_error(run_cli, tools, h, tmp_path):
    ns = run_cli("gpu_health", "--expected-gpus", "8", *tools(xml="../kernel/dmesg_clean_6.18_firecracker.txt"))
    h.check_artifacts(ns, status="error", suite="gpu_health")
    assert "unparseable" in ns.summary["reason"]


@pytest.mark.parametrize("window, status79", [(24, "fail"), (0.5, "warn")])
def test_xids_from_the_kernel_log(run_inproc, tools, h, monkeypatch, window, status79):
    monkeypatch.setattr(gpu_health.kernel_log, "uptime_seconds", lambda: 90000.0)  # 1 h after the Xid 79
    ns = run_inproc(
        gpu_health, "--expected-gpus", "2", "--xid-window-hours", str(window),
        *tools(dmesg="dmesg_xids_derived.txt"),
    )
    xids = {(c["device"], c["code"]): c for c in ns.result["checks"] if c["name"] == "xid"}
    if status79 == "fail":  # each condition its own code: bus, memory
        bus = xids[("cuda:1", "GPU_FALLEN_OFF_BUS")]
        assert bus["status"] == "fail" and bus["action"] == "reboot"
        assert "Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, driver hint: RESTART_BM), 1 h ago" in bus["message"]
        assert xids[("cuda:1", "XID_MEMORY_ERROR")]["status"] == "fail"  # Xid 94, on AzureHPC NHC's list
    else:  # older than the window: still reported, as a warning; but a GPU that fell off the bus stays
        # failing until the log shows it reset: this boot's log shows no reset
        old = xids[("cuda:1", "XID_HISTORICAL")]
        assert old["status"] == "warn" and "Xid 94" in old["message"]
        bus = xids[("cuda:1", "GPU_FALLEN_OFF_BUS")]
        assert bus["status"] == "fail" and "1 h ago; no GPU reset or driver reload since" in bus["message"]
    app = xids[("cuda:0", "XID_APPLICATION")]
    assert app["status"] == "warn" and "Xid 13 (ROBUST_CHANNEL_GR_EXCEPTION" in app["message"]
    # Xid 109 (context-switch timeout, NVIDIA: RESET_GPU) 24.1 h before, past both windows: its GPU is
    # broken until a reset, and this boot's log shows none
    ctxsw = xids[("cuda:0", "XID_CRITICAL")]
    assert ctxsw["status"] == "fail" and "Xid 109 (ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR" in ctxsw["message"]
    assert "no GPU reset or driver reload since" in ctxsw["message"] and ("cuda:0", "XID_HISTORICAL") not in xids
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    assert ns.result["metrics"]["xid_events"] == 5


@pytest.mark.parametrize(
    "fixture, device",
    [
        ("dmesg_fallen_off_bus_570.158.01.txt", "pci:0000:b3:00"),  # multi-line, no Xid token (R570)
        ("dmesg_fallen_off_bus_one_line.txt", "pci:0000:01:00"),  # older one-line report
    ],
)
def test_gpu_fallen_off_the_bus_without_an_xid_fails(run_cli, tools, h, fixture, device):
    ns = run_cli("gpu_health", "--expected-gpus", "2", *tools(dmesg=fixture))
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    bad = h.failing(ns, "gpu_fallen_off_bus")
    assert [c["device"] for c in bad] == [device] and bad[0]["code"] == "GPU_FALLEN_OFF_BUS"
    assert by_name(ns, "xid")[None]["status"] == "pass", "no Xid line: only the fallen-off-bus check catches it"
    assert bad[0]["action"] == "reboot" and bad[0]["status"] == "fail"


def test_unreadable_kernel_log_is_a_visible_skip_never_a_clean_pass(run_cli, tools, h):
    """dmesg under kernel.dmesg_restrict=1 without CAP_SYSLOG (recorded from util-linux 2.38.1)."""
    ns = run_cli("gpu_health", "--expected-gpus", "2", *tools(dmesg="dmesg_restricted.stderr", dmesg_rc=1))
    h.check_artifacts(ns, status="pass", suite="gpu_health")
    for name in ("xid", "driver_log", "gpu_fallen_off_bus"):
        c = by_name(ns, name)[None]
        assert c["status"] == "skip" and c["code"] == "KERNEL_LOG_UNREADABLE", name
        assert "read kernel buffer failed: Operation not permitted" in c["message"]
    assert ns.summary["incomplete"] is True and ns.result["incomplete"] is True
    # 2x ECC off, 2x the thermal violation counter (NVML only), the three kernel-log checks, dcgmi not installed
    # ... and the RTX A5000 has no baseline: a finding, not judged against one
    assert ns.summary["reason"].startswith("pass, 9 check(s) could not run: ")
    assert {"name": "xid", "status": "skip"}.items() <= next(
        c for c in ns.summary["checks"] if c["name"] == "xid"
    ).items()


def test_the_journal_keeps_kernel_levels_so_nvswitch_info_lines_are_no_driver_error(run_cli, tools, fake_tool, h,
                                                                                    tmp_path):
    """nolebase's NVSwitch lines (`Probing device`, `using MSI`: pr_info in linux_nvswitch.c) as the
    journal holds them. A fake journalctl answers the format it is asked for: `-o json` the records
    (PRIORITY 6), a short format the same lines without their level, as journalctl prints them. Read
    with their level they are info lines, never DRIVER_ERROR_UNRECOGNISED (dmesg -r passes them too)."""
    import json

    jdir = tmp_path / "journal"
    jdir.mkdir()
    records = h.FIXTURES / "kernel" / "journalctl-o-json_nvswitch_probe_msi_525.125.06_derived.txt"
    short = tmp_path / "short-monotonic.txt"
    short.write_text("".join(f"[{int(r['_SOURCE_MONOTONIC_TIMESTAMP']) / 1e6:12.6f}] {r['_HOSTNAME']} kernel: "
                             f"{r['MESSAGE']}\n" for r in map(json.loads, records.read_text().splitlines())))
    jctl = fake_tool("journalctl", f'case " $* " in *" -o json "*) cat "{records}" ;; *) cat "{short}" ;; esac')
    args = tools(dmesg="dmesg_restricted.stderr", dmesg_rc=1)
    ns = run_cli("gpu_health", "--expected-gpus", "2", *args, "--journal-dir", str(jdir), "--journalctl", str(jctl))
    driver = [c for c in ns.result["checks"] if c["name"] == "driver_log"]
    assert driver and not [c for c in driver if c["code"] == "DRIVER_ERROR_UNRECOGNISED"], driver
    assert ns.result["status"] == "pass"


def test_journal_records_become_dmesg_r_lines_with_their_level():
    from cluster_doctor_suites.checkers import kernel_log

    text = kernel_log.from_journal_json(
        '{ "PRIORITY" : "3", "_SOURCE_MONOTONIC_TIMESTAMP" : "4254197860", "MESSAGE" : "NVRM: Xid (PCI:0000:5d:00): 79, '
        'pid=\'<unknown>\', name=<unknown>, GPU has fallen off the bus." }\n'
        '{ "PRIORITY" : "4", "__MONOTONIC_TIMESTAMP" : "14387209961", "MESSAGE" : [78, 86, 82, 77, 58, 32, 255] }\n'
        'not a record\n')
    (xid, raw, other) = kernel_log.split(text)
    assert (xid.level, xid.uptime_s) == (3, 4254.19786) and "Xid (PCI:0000:5d:00): 79" in xid.text
    assert raw.level == 4 and raw.text.startswith("<4>[") and "NVRM: \ufffd" in raw.text
    assert other.level is None and other.text == "not a record"


def test_journal_dir_reads_the_node_journal_without_cap_syslog(run_cli, tools, fake_tool, h, tmp_path):
    jdir = tmp_path / "journal"
    jdir.mkdir()
    F = h.FIXTURES / "kernel"
    jctl = fake_tool("journalctl", f'cat "{F / "journal_xid45_after_xid149_590.48.01.txt"}"')
    args = tools(dmesg="dmesg_restricted.stderr", dmesg_rc=1)
    ns = run_cli("gpu_health", "--expected-gpus", "2", *args, "--journal-dir", str(jdir), "--journalctl", str(jctl))
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    xid = [c for c in ns.result["checks"] if c["name"] == "xid" and c["status"] != "skip"]
    # each Xid 45 line says it was caused by an earlier NVLink Xid 149 / 145: judged as that one
    assert {c["status"] for c in xid} == {"fail"} and all("Xid 45 caused by Xid 14" in c["message"] for c in xid)
    assert {c["code"] for c in xid} == {"XID_NVLINK_ERROR"} and "node journal" in xid[0]["message"]
    # the excerpt does not reach back to the boot: what it does not hold is not proven absent
    skipped = {(c["name"], c["code"]) for c in ns.result["checks"] if c["status"] == "skip"}
    assert skipped == {("ecc_uncorrected_volatile", "ECC_COUNTERS_UNAVAILABLE"), ("dcgm_diag", "DCGM_UNAVAILABLE"),
                       ("thermal_violation", "THERMAL_VIOLATION_UNAVAILABLE"), ("baseline", "BASELINE_MISSING")} | {
        (n, "KERNEL_LOG_INCOMPLETE") for n in ("driver_log", "gpu_fallen_off_bus")}  # xid: its failures


def test_genuine_a100_mig_output_passes_but_says_what_it_could_not_check(run_cli, tools, h):
    ns = run_cli("gpu_health", "--expected-gpus", "1", *tools(xml="nvidia-smi-q-x_510.47.03_A100-SXM4-40GB_mig.xml"))
    h.check_artifacts(ns, status="pass", suite="gpu_health")
    skipped = {c["name"]: c["code"] for c in ns.result["checks"] if c["status"] == "skip"}
    assert skipped["ecc_uncorrected_volatile"] == "ECC_COUNTERS_UNAVAILABLE"  # MIG: volatile ECC is N/A
    assert skipped["recovery_action"] == "GPU_RECOVERY_STATE_UNAVAILABLE"  # R510 has no recovery action
    assert ns.summary["incomplete"] is True and ns.summary["reason"].startswith("pass, ")
    assert by_name(ns, "pcie_width")["cuda:0"]["status"] == "pass"


def _dcgm_4x_failure(h) -> str:
    """DCGM#253's DCGM 4 table with GPU 1 failing the software test, as DCGM 4 marks it."""
    text = h.fx("dcgm", "dcgmi-diag-r1_4.2.3_570.148.08_head.txt")
    text = derive(text, None, "| software                  | Pass ", "| software                  | Fail ")
    return derive(text, None, "| GPU1: Pass ", "| GPU1: Fail ")


@pytest.mark.parametrize(
    "fixture, status, version, failing",
    [
        ("dcgmi-diag-r1_4.2.3_570.148.08_head.txt", "pass", "4.2.3", set()),
        ("dcgmi-diag-r2_3.3.1_535.129.03_gpu_memory_fail.txt", "fail", "3.3.1",
         {("dcgm_gpu_memory", "cuda:0"), ("dcgm_diagnostic", None), ("dcgm_targeted_stress", None)}),
        ("dcgmi-diag-r2_3.3.0_530.30.02_pcie_fail.txt", "fail", "3.3.0", {("dcgm_pcie", None)}),
        ("4x-derived", "fail", "4.2.3", {("dcgm_software", "cuda:1")}),
    ],
)
def test_dcgm_diag(run_cli, tools, h, fixture, status, version, failing):
    dcgm = _dcgm_4x_failure(h) if fixture == "4x-derived" else fixture
    ns = run_cli("gpu_health", "--expected-gpus", "2", *tools(dcgm=dcgm, dcgm_rc=0 if status == "pass" else 226))
    h.check_artifacts(ns, status=status, suite="gpu_health")
    dcgm_checks = [c for c in ns.result["checks"] if c["name"].startswith("dcgm_")]
    assert dcgm_checks, "dcgmi results must become checks"
    assert ns.result["environment"]["dcgm"] == version
    assert {(c["name"], c["device"]) for c in h.failing(ns) if c["name"].startswith("dcgm_") and c["name"] != "dcgm_diag"} == failing
    assert all(c["code"] == "DCGM_DIAG_FAIL" for c in h.failing(ns) if c["name"].startswith("dcgm_"))
    assert by_name(ns, "dcgm_diag")[None]["status"] == status


def test_dcgm_message_keeps_the_words_of_a_wrapped_warning(run_cli, tools, h):
    args = tools(dcgm="dcgmi-diag-r2_3.3.1_535.129.03_gpu_memory_fail.txt", dcgm_rc=226)
    ns = run_cli("gpu_health", "--expected-gpus", "2", *args)
    msg = h.failing(ns, "dcgm_gpu_memory")[0]["message"]
    assert "cuCtxCreate Check DCGM and system logs for errors. Reset GPU. Restart DCGM." in msg


def test_dcgm_without_hostengine_is_skipped_with_a_warning(run_cli, tools, h):
    ns = run_cli(
        "gpu_health", "--expected-gpus", "2", *tools(dcgm="dcgmi_no_hostengine_3.3.0.txt", dcgm_rc=255)
    )
    h.check_artifacts(ns, status="pass", suite="gpu_health")
    assert by_name(ns, "dcgm_diag")[None]["status"] == "skip"
    assert any("no DCGM host engine" in w for w in ns.result["warnings"])


def test_dcgm_garbage_is_an_error_never_a_pass(run_cli, tools, h):
    ns = run_cli("gpu_health", "--expected-gpus", "2", *tools(dcgm="../kernel/dmesg_clean_6.18_firecracker.txt"))
    h.check_artifacts(ns, status="error", suite="gpu_health")
    assert "unparseable dcgmi diag -r 1 output" in ns.summary["reason"]


# ------------------------------------------------------------------ dcgmi diag -j first, the table as fallback
NVVS_31 = "nvvs-json_3.1.0_8gpu_pass_dcgm-jsonresulttests.txt"
DCGM4_DIAG_EXCERPT = "dcgmi-diag-r4-j_4.x_8gpu_diagnostic_test_excerpt.txt"
# TCLAP's StdOutput::failure for an option it does not know (dcgmi parses its options with TCLAP), exit 1
TCLAP_UNKNOWN_J = "PARSE ERROR: Argument: -j\n             Couldn't find match for argument\n"


@pytest.fixture
def dcgmi(fake_tool, h, tmp_path):
    """A fake dcgmi that logs its arguments to calls.txt. `json`: what `diag ... -j` prints (fixture
    name or text) and exits with (`json_rc`, 226 = DCGM_ST_NVVS_ERROR when a test failed); None: it
    does not know -j and rejects it as TCLAP does. `table`: what `diag` without -j prints."""

    def make(json=None, json_rc=0, table=None, table_rc=0):
        calls = tmp_path / "calls.txt"

        def path(what, name):
            if what is None:
                return None
            if "\n" in what:
                p = tmp_path / name
                p.write_text(what)
                return p
            return h.FIXTURES / "dcgm" / what

        jpath, tpath = path(json, "dcgm.json"), path(table, "dcgm-table.txt")
        usage = tmp_path / "tclap-unknown-j.txt"
        usage.write_text(TCLAP_UNKNOWN_J)
        on_j = f'cat "{jpath}"; exit {json_rc}' if jpath else f'cat "{usage}" >&2; exit 1'
        on_table = f'cat "{tpath}"; exit {table_rc}' if tpath else "exit 3"
        body = f"""echo "$*" >> "{calls}"
case " $* " in
  *" -j "*) {on_j} ;;
  *) {on_table} ;;
esac"""
        tool = fake_tool("dcgmi", body)
        return ["--dcgmi", str(tool)], (lambda: calls.read_text().splitlines() if calls.exists() else [])

    return make


def _gpu_health(run_cli, tools, dcgmi_args):
    base = tools()
    i = base.index("--dcgmi")
    return run_cli("gpu_health", "--expected-gpus", "2", *(base[:i] + base[i + 2:]), *dcgmi_args)


def test_dcgm_json_is_preferred_over_the_table(run_cli, tools, dcgmi, h):
    """dcgmi with -j: the JSON is judged and the table is never asked for (the table it would print
    fails PCIe, the JSON passes everything)."""
    args, calls = dcgmi(json=NVVS_31, table="dcgmi-diag-r2_3.3.0_530.30.02_pcie_fail.txt", table_rc=226)
    ns = _gpu_health(run_cli, tools, args)
    h.check_artifacts(ns, status="pass", suite="gpu_health")
    assert calls() == ["diag -r 1 -j"]
    assert ns.result["environment"]["dcgm"] == "3.1.0"
    dcgm = {(c["name"], c["status"]) for c in ns.result["checks"] if c["name"].startswith("dcgm_")}
    assert ("dcgm_environmental_variables", "pass") in dcgm  # NVVS's own test name, only in the JSON
    assert ("dcgm_software", "pass") in dcgm and ("dcgm_page_retirement_row_remap", "pass") in dcgm
    assert not any(name == "dcgm_pcie" for name, _ in dcgm)


def test_dcgm_json_failure_on_one_gpu(run_cli, tools, dcgmi, h):
    """DCGM 3 JSON with GPU 3's software result FAIL; dcgmi exits 226 as it does when a test failed."""
    text = h.fx("dcgm", NVVS_31)
    old = '"gpu_ids" : 3,\n\t\t\t\t\t\t\t\t"status" : "PASS"'
    assert text.count(old) == 1
    args, calls = dcgmi(json=text.replace(old, old.replace("PASS", "FAIL")), json_rc=226)
    ns = _gpu_health(run_cli, tools, args)
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    assert calls() == ["diag -r 1 -j"]
    bad = [c for c in h.failing(ns) if c["name"].startswith("dcgm_") and c["name"] != "dcgm_diag"]
    assert [(c["name"], c["device"], c["code"]) for c in bad] == [("dcgm_software", "cuda:3", "DCGM_DIAG_FAIL")]


def test_dcgm_4x_json_failure(run_cli, tools, dcgmi, h):
    """DCGM#215's DCGM 4 diagnostic test as a document, GPU 5 and the test summary set to Fail."""
    text = h.dcgm4_document(h.fx("dcgm", DCGM4_DIAG_EXCERPT), "4.1.1")
    text = derive(text, None, '"entity_id" : 5,\n' + " " * 64 + '"status" : "Pass"',
                  '"entity_id" : 5,\n' + " " * 64 + '"status" : "Fail"')
    text = derive(text, None, '{\n' + " " * 56 + '"status" : "Pass"\n' + " " * 48 + "}",
                  '{\n' + " " * 56 + '"status" : "Fail"\n' + " " * 48 + "}")
    args, _ = dcgmi(json=text, json_rc=226)
    ns = _gpu_health(run_cli, tools, args)
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    assert ns.result["environment"]["dcgm"] == "4.1.1"
    assert {(c["name"], c["device"]) for c in h.failing(ns) if c["name"].startswith("dcgm_")} == {
        ("dcgm_diagnostic", "cuda:5"), ("dcgm_diag", None)
    }


@pytest.mark.parametrize(
    "table, rc, status, version, failing",
    [
        ("dcgmi-diag-r1_4.2.3_570.148.08_head.txt", 0, "pass", "4.2.3", set()),
        ("dcgmi-diag-r2_3.3.1_535.129.03_gpu_memory_fail.txt", 226, "fail", "3.3.1",
         {("dcgm_gpu_memory", "cuda:0"), ("dcgm_diagnostic", None), ("dcgm_targeted_stress", None)}),
    ],
)
def test_dcgm_without_json_support_falls_back_to_the_table(
    run_cli, tools, dcgmi, h, table, rc, status, version, failing
):
    """A dcgmi that rejects -j (TCLAP: 'Couldn't find match for argument', exit 1): the suite runs
    `dcgmi diag -r 1` again and judges the table."""
    args, calls = dcgmi(json=None, table=table, table_rc=rc)
    ns = _gpu_health(run_cli, tools, args)
    h.check_artifacts(ns, status=status, suite="gpu_health")
    assert calls() == ["diag -r 1 -j", "diag -r 1"]
    assert ns.result["environment"]["dcgm"] == version
    assert {(c["name"], c["device"]) for c in h.failing(ns) if c["name"].startswith("dcgm_") and c["name"] != "dcgm_diag"} == failing
    assert by_name(ns, "dcgm_diag")[None]["status"] == status


def test_dcgm_json_runtime_error_is_not_retried_as_a_table(run_cli, tools, dcgmi, h):
    """dcgmi understood -j but the diagnostic did not run: its `runtime_error` is the reason (the
    document dcgmi's HelperDisplayFailureMessage prints), no second run."""
    doc = ('{\n\t"DCGM GPU Diagnostic" : \n\t{\n\t\t"runtime_error" : "Error: Diagnostic could not be run '
           'while DCGM is paused.",\n\t\t"version" : "3.3.1"\n\t}\n}\n')
    args, calls = dcgmi(json=doc, json_rc=1, table="dcgmi-diag-r1_4.2.3_570.148.08_head.txt")
    ns = _gpu_health(run_cli, tools, args)
    h.check_artifacts(ns, status="pass", suite="gpu_health")  # the diagnostic did not run: not run, visible
    assert calls() == ["diag -r 1 -j"] and ns.summary["incomplete"] is True
    check = by_name(ns, "dcgm_diag")[None]
    assert check["status"] == "skip" and check["code"] == "DCGM_UNAVAILABLE"
    assert "could not be run while DCGM is paused" in check["message"]


def test_dcgm_json_without_hostengine_is_skipped_without_a_second_run(run_cli, tools, dcgmi, h):
    args, calls = dcgmi(json="dcgmi_no_hostengine_3.3.0.txt", json_rc=255, table="dcgmi_no_hostengine_3.3.0.txt")
    ns = _gpu_health(run_cli, tools, args)
    h.check_artifacts(ns, status="pass", suite="gpu_health")
    assert calls() == ["diag -r 1 -j"]
    assert by_name(ns, "dcgm_diag")[None]["status"] == "skip"


# ------------------------------------------------------------------ NVML path with a fake module
def test_nvml_path(run_inproc, h, monkeypatch, tools):
    fake = FakeNVML()
    monkeypatch.setattr(gpu_health, "nvml_init", lambda: fake)
    args = tools()
    args[args.index("--source") + 1] = "auto"
    ns = run_inproc(gpu_health, "--expected-gpus", "3", "--expect", "gpus=3", "--xid-listen-seconds", "0.2", *args)
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    fails = {(c["name"], c["device"]) for c in h.failing(ns)}
    assert fails == {
        ("row_remap_failure", "cuda:1"),
        ("nvlink", "cuda:1"),
        ("gpu_reachable", "cuda:2"),
        ("xid", "cuda:0"),
    }
    assert by_name(ns, "xid")["cuda:0"]["code"] == "GPU_FALLEN_OFF_BUS"  # live Xid 79
    assert by_name(ns, "nvlink")["cuda:1"]["message"].startswith("NVLink link(s) 3 inactive; 17 active, expected 18 (expected 18: baselines.yaml h100-sxm")
    env = ns.result["environment"]
    assert env["gpu_state_source"] == "NVML" and env["driver"] == "570.124.06" and env["cuda"] == "12.8"
    assert by_name(ns, "fabric")["cuda:0"]["status"] == "pass"
    assert "live NVML event" in by_name(ns, "xid")["cuda:0"]["message"]
    thr = by_name(ns, "clock_throttle")
    assert thr["cuda:0"]["status"] == "warn" and "hw_slowdown seen in one sample" in thr["cuda:0"]["message"]
    assert thr["cuda:1"]["status"] == "pass" and fake.samples[1] == 3
    assert fake.shutdown, "NVML must be shut down"


def test_nvml_recovery_action_is_read_and_judged(run_inproc, h, monkeypatch, tools):
    fake = FakeNVML()
    fake.recovery = {0: 1, 1: 0}  # the driver asks for a GPU reset of GPU 0
    fake.live_xids = []
    monkeypatch.setattr(gpu_health, "nvml_init", lambda: fake)
    args = tools()
    args[args.index("--source") + 1] = "auto"
    ns = run_inproc(gpu_health, "--expected-gpus", "3", "--expect", "gpus=3", "--xid-listen-seconds", "0.1", *args)
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    rec = by_name(ns, "recovery_action")
    assert rec["cuda:0"]["status"] == "fail" and rec["cuda:0"]["value"] == "GPU Reset"
    assert rec["cuda:0"]["code"] == "GPU_RECOVERY_ACTION" and rec["cuda:1"]["status"] == "pass"


def test_a_node_short_of_its_gpus_fails_seven_of_eight(run_inproc, tools, h):
    """The device plugin offers 1 of the node's 2 GPUs (its capacity says 2): the pod was given 1, sees
    1, and fails against the node's 2 — where it used to pass "1 of 1"."""
    xml = "nvidia-smi-q-x_510.47.03_A100-SXM4-40GB_mig.xml"
    ns = run_inproc(gpu_health, "--expected-gpus", "1", "--node-gpus", "2", *tools(xml=xml))
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    c = next(c for c in ns.result["checks"] if c["name"] == "gpu_count")
    assert c["status"] == "fail" and c["code"] == "GPU_COUNT_LOW" and c["threshold"] == "== 2"
    assert "expected 2 GPUs, found 1" in c["message"] and "the orchestrator saw 1" in c["message"]
    assert ns.result["environment"]["node_gpus"] == 2


def test_seven_of_seven_on_an_eight_gpu_board_fails_whatever_capacity_says(run_inproc, tools, monkeypatch, h):
    """A GPU that does not enumerate after a reboot lowers capacity and the GFD label too: Kubernetes
    sends --node-gpus 7 --expected-gpus 7 for an HGX H100 node showing 7 GPUs. The SKU's 8 stay the
    bar; only the node pool's own override may lower it."""
    nv = FakeNVML(sick=False, count=7)
    monkeypatch.setattr(gpu_health, "nvml_init", lambda: nv)
    args = tools()
    args[args.index("--source") + 1] = "auto"
    ns = run_inproc(gpu_health, "--node-gpus", "7", "--expected-gpus", "7", "--xid-listen-seconds", "0", *args)
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    c = next(c for c in ns.result["checks"] if c["name"] == "gpu_count")
    assert (c["status"], c["code"], c["value"], c["threshold"]) == ("fail", "GPU_COUNT_LOW", 7, "== 8")
    assert "baselines.yaml h100-sxm" in c["message"] and "the orchestrator saw 7" in c["message"]
    pool = run_inproc(gpu_health, "--node-gpus", "7", "--expected-gpus", "7", "--expect", "gpus=7",
                      "--xid-listen-seconds", "0", *args)
    assert next(c for c in pool.result["checks"] if c["name"] == "gpu_count")["status"] == "pass"


def test_the_sku_is_the_bar_when_nothing_else_says(run_inproc, tools, h):
    """Bare metal without --expected-gpus under an H100 label: the SKU's 8, not a skip."""
    ns = run_inproc(gpu_health, "--gpu-model", "NVIDIA-H100-80GB-HBM3", *tools())
    c = next(c for c in ns.result["checks"] if c["name"] == "gpu_count")
    assert c["status"] == "fail" and "expected 8 GPUs, found 2" in c["message"] and "h100-sxm" in c["message"]


# ------------------------------------------------------------------ thermal throttling under load
S = 10**9  # NVML's violation time is in ns
BOOT_A, BOOT_B = "8a1f5a0e-2f1c-4c55-9a8e-0c1f7f4a2b11", "3d0b9c42-61e7-4f0a-b5d8-2e7a9c1f4b60"


@pytest.fixture
def thermal(run_inproc, tools, monkeypatch, tmp_path):
    """Two healthy H100s through the fake NVML and gpu_health runs sharing one output directory (each
    reads the previous run's result there); the suite's clock moves by what `run(later_s)` says."""
    nv = FakeNVML(sick=False, count=2)
    monkeypatch.setattr(gpu_health, "nvml_init", lambda: nv)
    clock = [dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)]
    monkeypatch.setattr(gpu_health, "utcnow", lambda: clock[0])
    boot = tmp_path / "boot_id"
    boot.write_text(BOOT_A + "\n")
    args = tools()
    args[args.index("--source") + 1] = "auto"
    args += ["--boot-id-file", str(boot), "--expected-gpus", "2", "--expect", "gpus=2", "--xid-listen-seconds", "0"]

    def run(later_s: float = 0, *extra: str):
        clock[0] += dt.timedelta(seconds=later_s)
        return run_inproc(gpu_health, *args, *extra)

    return SimpleNamespace(nv=nv, run=run, boot=boot)


def thermal_of(ns) -> dict:
    return {d: (c["status"], c["code"]) for d, c in by_name(ns, "thermal_violation").items()}


def test_thermal_throttling_under_load_between_two_runs_fails_the_gpu_that_throttled(thermal, h):
    """Idle, both GPUs are cool and unthrottled. The first run keeps their counters (not judged: no
    baseline); in the hour after, a job loads them: GPU 1's cooling fails (300 s held down by thermal
    limits), GPU 0 is held 30 s. The second run fails GPU 1 and warns for GPU 0."""
    thermal.nv.thermal_ns = {0: 4 * S, 1: 12 * S}
    first = thermal.run()
    h.check_artifacts(first, status="pass", suite="gpu_health")
    assert thermal_of(first) == {"cuda:0": ("skip", "THERMAL_VIOLATION_NO_BASELINE"),
                                 "cuda:1": ("skip", "THERMAL_VIOLATION_NO_BASELINE")}
    kept = first.result["environment"]["thermal_violation"]
    assert kept["boot_id"] == BOOT_A and kept["source"] == "NVML"
    assert [(g["index"], g["uuid"], g["pci_bus_id"], g["ns"]) for g in kept["gpus"]] == [
        (0, "GPU-0", "00000000:18:00.0", 4 * S), (1, "GPU-1", "00000000:19:00.0", 12 * S)]
    assert first.result["metrics"]["thermal_violation_s_cuda1"] == 12
    assert {c["status"] for c in by_name(first, "clock_throttle").values()} == {"pass"}  # idle: nothing to see

    thermal.nv.thermal_ns[0] += 30 * S
    thermal.nv.thermal_ns[1] += 300 * S
    second = thermal.run(3600)
    h.check_artifacts(second, status="fail", suite="gpu_health")
    assert {(c["name"], c["device"]) for c in h.failing(second)} == {("thermal_violation", "cuda:1")}
    assert thermal_of(second) == {"cuda:0": ("warn", "THERMAL_VIOLATION_GROWING"),
                                  "cuda:1": ("fail", "THERMAL_VIOLATION_UNDER_LOAD")}
    bad = by_name(second, "thermal_violation")["cuda:1"]
    assert bad["value"] == 300 and bad["action"] == second.summary["action"] == "drain_and_service"
    assert "held the clocks down for 300 s of the 3600 s" in bad["message"] and "(00000000:19:00.0)" in bad["message"]
    assert by_name(second, "thermal_violation")["cuda:0"]["value"] == 30
    assert second.result["environment"]["thermal_violation_previous"] == first.summary["result_path"]
    assert second.summary["reason"].startswith("thermal_violation[cuda:1]: thermal limits held")


def test_thermal_no_growth_since_the_previous_run_passes(thermal, h):
    thermal.nv.thermal_ns = {0: 4 * S, 1: 0}
    thermal.run()
    ns = thermal.run(3600)
    assert thermal_of(ns) == {"cuda:0": ("pass", None), "cuda:1": ("pass", None)}
    assert "no thermal throttling in the 3600 s" in by_name(ns, "thermal_violation")["cuda:0"]["message"]


def test_a_reboot_between_runs_starts_a_new_baseline(thermal, h):
    """After a reboot the counters count from 0 again: 40 s now against 4 s before is no growth of
    36 s; the run after is judged against the sample taken after the reboot."""
    thermal.nv.thermal_ns = {0: 4 * S, 1: 4 * S}
    thermal.run()
    thermal.boot.write_text(BOOT_B + "\n")
    thermal.nv.thermal_ns = {0: 40 * S, 1: 400 * S}
    ns = thermal.run(3600)
    h.check_artifacts(ns, status="pass", suite="gpu_health")
    assert set(thermal_of(ns).values()) == {("skip", "THERMAL_VIOLATION_REBOOTED")}
    assert "rebooted since the previous sample" in by_name(ns, "thermal_violation")["cuda:1"]["message"]
    ns = thermal.run(3600)
    assert set(thermal_of(ns).values()) == {("pass", None)}


def test_thermal_counter_lower_than_before_is_a_new_baseline_not_a_pass(thermal, h):
    """The driver reloaded (or the GPU was reset) without a reboot: GPU 0's counter is lower than last
    time; not judged now, judged against its new value from the next run."""
    thermal.nv.thermal_ns = {0: 50 * S, 1: 0}
    thermal.run()
    thermal.nv.thermal_ns[0] = 1 * S
    ns = thermal.run(3600)
    assert thermal_of(ns) == {"cuda:0": ("skip", "THERMAL_VIOLATION_COUNTER_RESET"), "cuda:1": ("pass", None)}
    thermal.nv.thermal_ns[0] += 300 * S
    ns = thermal.run(3600)
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    assert thermal_of(ns)["cuda:0"] == ("fail", "THERMAL_VIOLATION_UNDER_LOAD")


def test_thermal_gpus_matched_by_uuid_when_the_index_order_changes(thermal, h):
    """The second run enumerates the GPUs the other way round: GPU-1, which throttled, is cuda:0 now
    and is judged against its own previous counter, not GPU-0's."""
    thermal.nv.thermal_ns = {0: 500 * S, 1: 4 * S}
    thermal.run()
    thermal.nv.order = [1, 0]
    thermal.nv.thermal_ns[1] += 300 * S
    ns = thermal.run(3600)
    h.check_artifacts(ns, status="fail", suite="gpu_health")
    assert thermal_of(ns) == {"cuda:0": ("fail", "THERMAL_VIOLATION_UNDER_LOAD"), "cuda:1": ("pass", None)}
    assert "(00000000:19:00.0)" in by_name(ns, "thermal_violation")["cuda:0"]["message"]


def test_a_thermal_failure_fails_its_gpu_through_idle_runs_and_a_reboot_until_its_window_ends(thermal, h):
    """GPU 1 throttled under load and failed; the retest of the drained node sees no load, so no growth,
    and passed it (the next user job landed on it). Now it fails again while its failure is inside
    thermal_violation_window_hours (24), after a reboot too; past the window it is judged normally."""
    thermal.nv.thermal_ns = {0: 0, 1: 0}
    thermal.run()
    thermal.nv.thermal_ns[1] += 300 * S
    failed = thermal.run(3600)
    assert thermal_of(failed)["cuda:1"] == ("fail", "THERMAL_VIOLATION_UNDER_LOAD")
    assert failed.result["environment"]["thermal_violation"]["gpus"][1]["under_load"]["throttled_s"] == 300
    retest = thermal.run(600)
    h.check_artifacts(retest, status="fail", suite="gpu_health")
    assert thermal_of(retest) == {"cuda:0": ("pass", None), "cuda:1": ("fail", "THERMAL_VIOLATION_UNDER_LOAD")}
    bad = by_name(retest, "thermal_violation")["cuda:1"]
    assert "(300 s of 3600 s), within the 24 h window" in bad["message"]
    assert retest.summary["action"] == "drain_and_service"
    thermal.boot.write_text(BOOT_B + "\n")
    thermal.nv.thermal_ns = {0: 0, 1: 0}
    rebooted = thermal.run(3600)
    assert thermal_of(rebooted) == {"cuda:0": ("skip", "THERMAL_VIOLATION_REBOOTED"),
                                    "cuda:1": ("fail", "THERMAL_VIOLATION_UNDER_LOAD")}
    assert thermal_of(thermal.run(20 * 3600))["cuda:1"] == ("fail", "THERMAL_VIOLATION_UNDER_LOAD")  # 21.2 h after
    past = thermal.run(3 * 3600)  # 24.2 h after the failure
    h.check_artifacts(past, status="pass", suite="gpu_health")
    assert thermal_of(past) == {"cuda:0": ("pass", None), "cuda:1": ("pass", None)}


def test_a_replaced_gpu_in_the_slot_of_a_thermal_failure_starts_clean(thermal, h):
    thermal.nv.thermal_ns = {0: 0, 1: 0}
    thermal.run()
    thermal.nv.thermal_ns[1] += 300 * S
    assert thermal_of(thermal.run(3600))["cuda:1"] == ("fail", "THERMAL_VIOLATION_UNDER_LOAD")
    thermal.nv.nvmlDeviceGetUUID = lambda handle: "GPU-new" if handle.i == 1 else f"GPU-{handle.i}"
    ns = thermal.run(600)
    h.check_artifacts(ns, status="pass", suite="gpu_health")
    assert thermal_of(ns) == {"cuda:0": ("pass", None), "cuda:1": ("skip", "THERMAL_VIOLATION_NO_BASELINE")}


def test_thermal_counter_not_supported_is_a_visible_skip(thermal, h):
    thermal.nv.thermal_unsupported = {0, 1}
    thermal.run()
    ns = thermal.run(3600)
    h.check_artifacts(ns, status="pass", suite="gpu_health")
    assert set(thermal_of(ns).values()) == {("skip", "THERMAL_VIOLATION_UNAVAILABLE")}
    assert "not supported" in by_name(ns, "thermal_violation")["cuda:0"]["message"]
    assert ns.result["environment"]["thermal_violation"]["gpus"][0]["ns"] is None


def test_thermal_baseline_from_previous_names_a_result_elsewhere(thermal, h, tmp_path):
    """--previous: the baseline from a result the output directory does not hold (copied elsewhere)."""
    thermal.nv.thermal_ns = {0: 0, 1: 0}
    first = thermal.run()
    kept = tmp_path / "elsewhere.json"
    kept.write_text(Path(first.summary["result_path"]).read_text())
    shutil.rmtree(Path(first.summary["result_path"]).parent)
    thermal.nv.thermal_ns[0] = 200 * S
    ns = thermal.run(3600, "--previous", str(kept))
    assert thermal_of(ns)["cuda:0"] == ("fail", "THERMAL_VIOLATION_UNDER_LOAD")
    assert ns.result["environment"]["thermal_violation_previous"] == str(kept)


def test_every_nvml_call_of_the_speed_checks_is_named_in_the_sources_and_the_probe_makes_none():
    import re

    root = Path(__file__).resolve().parents[3] / "include" / "suites"
    sources = (Path(__file__).resolve().parent / "fixtures" / "SOURCES.md").read_text()
    section = sources[sources.index("## NVML calls of gpu_health's speed checks"):]
    speed = ("ClocksEventReasons", "ClocksThrottleReasons", "ViolationStatus", "PcieLink", "PcieReplay", "NvLinkState")
    used = set(re.findall(r'"(nvmlDevice[A-Za-z]+)"', (root / "gpu_state.py").read_text()))
    used |= set(re.findall(r"\.(nvmlDevice[A-Za-z]+)\(", (root / "gpu_state.py").read_text()))
    calls = sorted(c for c in used if any(s in c for s in speed))
    assert len(calls) >= 9, calls
    for call in calls:
        assert f"`{call}" in section or f"/ `{call}" in section, call
    assert "nvml" not in (root / "dl" / "probe.py").read_text().lower().replace("nvml index", "")
