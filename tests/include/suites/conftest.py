"""Shared helpers for the suite tests: run a suite (subprocess or in-process), load its artifacts,
validate them against the schema, and fake external tools (fio, nvidia-smi, dcgmi, all_reduce_perf)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from jsonschema import Draft202012Validator

from tests.support.fake_tools import shell_tool

ROOT = Path(__file__).resolve().parents[3]
SUITES_DIR = ROOT / "include" / "suites"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
PREFIX = "CLUSTER_DOCTOR_RESULT "


def _schema() -> dict:
    return json.loads((SUITES_DIR / "result.schema.json").read_text())


def result_validator() -> Draft202012Validator:
    return Draft202012Validator(_schema())


def summary_validator() -> Draft202012Validator:
    s = _schema()
    return Draft202012Validator({"$ref": "#/$defs/summary", "$defs": s["$defs"]})


def _env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the suites come from the installed distribution
    for k in list(env):  # the suites read these; a developer's shell must not change the tests
        if k.startswith("CLUSTER_DOCTOR_") or k in ("NODE_NAME", "SLURMD_NODENAME", "NCCL_IB_HCA"):
            del env[k]
    env.update(extra or {})
    return env


def _artifacts(rc: int, stdout: str, stderr: str, term: Path) -> SimpleNamespace:
    ns = SimpleNamespace(
        rc=rc,
        stdout=stdout,
        stderr=stderr,
        summary=None,
        term_bytes=None,
        result=None,
        log=None,
        stdout_summary=None,
    )
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if lines and lines[-1].startswith(PREFIX):
        ns.stdout_summary = json.loads(lines[-1][len(PREFIX) :])
    if term.exists():
        ns.term_bytes = term.read_bytes()
        ns.summary = json.loads(ns.term_bytes)
    s = ns.summary or ns.stdout_summary
    if s and s.get("result_path") and Path(s["result_path"]).exists():
        ns.result = json.loads(Path(s["result_path"]).read_text())
    if s and s.get("log_path") and Path(s["log_path"]).exists():
        ns.log = Path(s["log_path"]).read_text()
    return ns


@pytest.fixture
def run_cli(tmp_path):
    """Run `python -m cluster_doctor_suites.<suite>` exactly as the pod does; returns rc, summary, result, log."""

    def run(
        suite: str,
        *args: str,
        env: dict | None = None,
        timeout: float = 120,
        node: str = "test-node-01",
        output_dir: Path | None = None,
    ):
        out = output_dir or tmp_path / "out"
        term = tmp_path / f"termination-log-{suite}"
        argv = [
            sys.executable,
            "-m",
            f"cluster_doctor_suites.{suite}",
            "--node",
            node,
            "--output-dir",
            str(out),
            "--termination-log",
            str(term),
            *args,
        ]
        p = subprocess.run(argv, capture_output=True, text=True, env=_env(env), timeout=timeout, cwd=tmp_path)
        return _artifacts(p.returncode, p.stdout, p.stderr, term)

    return run


@pytest.fixture
def run_inproc(tmp_path, capsys):
    """Run a suite's main(argv) in this process (for monkeypatched fault injection)."""

    def run(module, *args: str, node: str = "test-node-01"):
        out = tmp_path / "out"
        term = tmp_path / f"termination-log-{module.SUITE}"
        rc = module.main(["--node", node, "--output-dir", str(out), "--termination-log", str(term), *args])
        captured = capsys.readouterr()
        return _artifacts(rc, captured.out, captured.err, term)

    return run


@pytest.fixture
def fake_tool(tmp_path):
    """An executable shell script standing in for a real tool."""

    def make(name: str, body: str) -> Path:
        return Path(shell_tool(tmp_path / "bin", name, body))

    return make


def check_artifacts(ns, *, status: str, suite: str) -> None:
    """The contract every run must meet, whatever its verdict."""
    codes = {"pass": 0, "fail": 1, "error": 2}
    assert ns.rc == codes[status], (ns.rc, ns.stdout[-3000:], ns.stderr[-3000:])
    assert ns.summary is not None, "no termination log written"
    assert len(ns.term_bytes) < 4096
    summary_validator().validate(ns.summary)
    assert ns.summary["status"] == status and ns.summary["suite"] == suite
    assert ns.stdout_summary == ns.summary, "last stdout line must be the summary"
    assert ns.result is not None, "no result JSON"
    result_validator().validate(ns.result)
    assert ns.result["status"] == status
    assert ns.log is not None and ns.log.rstrip().splitlines()[-1] == PREFIX + json.dumps(
        ns.summary, separators=(",", ":")
    ), "the log must end with the summary line"
    rp, lp = Path(ns.summary["result_path"]), Path(ns.summary["log_path"])
    assert rp.parent == lp.parent and rp.with_suffix(".log") == lp
    assert rp.parent.parent.name == suite and rp.name.startswith(f"{suite}_{ns.summary['node']}_")
    assert not [p for p in rp.parent.iterdir() if p.name.startswith(".")], "temporary files left behind"
    from cluster_doctor_suites import codes

    for c in ns.result["checks"]:  # every non-pass check carries a documented, specific code and an action
        if c["status"] != "pass":
            assert c["code"] in codes.registry() and c["code"] != codes.UNCLASSIFIED, (c["name"], c["status"], c["code"])
            assert c["action"] in codes.ACTIONS, (c["name"], c["action"])
        else:
            assert c["action"] is None
    assert ns.result["action"] in codes.ACTIONS and ns.summary["action"] == ns.result["action"]
    if status == "pass":
        assert ns.result["action"] == "none"
    skipped = any(c["status"] == "skip" for c in ns.result["checks"])
    assert ns.result["incomplete"] is skipped and ns.summary["incomplete"] is skipped
    if status == "pass" and skipped:
        assert ns.summary["reason"].startswith("pass, ") and "could not run" in ns.summary["reason"]


def failing(ns, name: str | None = None, status: str = "fail") -> list[dict]:
    return [c for c in ns.result["checks"] if c["status"] == status and (name is None or c["name"] == name)]


def dcgm4_document(excerpt: str, version: str | None = None) -> str:
    """DCGM#215's DCGM 4 test object as a whole `dcgmi diag -j` document: the excerpt (its trailing
    comma dropped) inside the DCGM 4 skeleton of DCGM's testing/python3/dcgm_diag_schema.json
    ("DCGM Diagnostic" > "test_categories" > "Hardware", where dcgmi lists the diagnostic test).
    `version` adds a `metadata` block; the reporter did not give the exact 4.x version."""
    body = excerpt.rstrip().rstrip(",")
    meta = f',\n\t"metadata" :\n\t{{\n\t\t"version" : "{version}"\n\t}}' if version else ""
    return (
        '{\n\t"DCGM Diagnostic" :\n\t{\n\t\t"test_categories" :\n\t\t[\n\t\t\t{\n'
        '\t\t\t\t"category" : "Hardware",\n\t\t\t\t"tests" :\n\t\t\t\t[\n'
        + body
        + "\n\t\t\t\t]\n\t\t\t}\n\t\t]\n\t}" + meta + "\n}\n"
    )



# ------------------------------------------------------------------------------ InfiniBand sysfs trees
_IB_STATE = {"Active": "4: ACTIVE", "Down": "1: DOWN", "Init": "2: INIT"}
_IB_PHYS = {"LinkUp": "5: LinkUp", "Polling": "2: Polling", "Disabled": "3: Disabled"}
_IB_RATE = {"400": "400 Gb/sec (4X NDR)", "200": "200 Gb/sec (4X HDR)", "100": "100 Gb/sec (4X EDR)",
            "40": "40 Gb/sec (4X QDR)"}


def h100_ib_tree(tmp_path: Path, *, cleared: bool = False) -> Path:
    """leptonai/gpud's /sys/class/infiniband of an HGX H100 node, copied; `cleared`: every counter as
    it reads after `perfquery -x -R` (the published ones carry port_rcv_errors 14, every
    excessive_buffer_overrun_errors at its 4-bit maximum 15 and mlx5_1's link_downed at its 8-bit 255:
    above infiniband-diags' thresholds on a first sample)."""
    import shutil

    root = tmp_path / "sys-class-infiniband"
    shutil.copytree(FIXTURES / "ib" / "sys-class-infiniband-h100_gpud", root)
    if cleared:
        for counter in root.glob("*/ports/1/counters/*"):
            counter.write_text("0\n")
    return root


# The DGX H100/H200 User Guide's compute HCAs (Table 5 "Network Port Mapping": each HCA's PCI bus; Table 6
# "Network Modules": the GPU each one serves) and its GPUs' bus ids as a DGX H100's nvidia-smi prints them
# (fixtures/SOURCES.md): GPU index -> (GPU bus, its HCA's bus). The bridges between them are derived.
DGX_H100_RAILS = {0: ("1b", "18"), 1: ("43", "40"), 2: ("52", "4f"), 3: ("61", "5e"),
                  4: ("9d", "9a"), 5: ("c3", "c0"), 6: ("d1", "ce"), 7: ("df", "dc")}
DGX_H100_STORAGE = ("29", "aa")  # the storage slots' ConnectX-7 (Slot2 P1, Slot1 P1): no GPU below their root port


def _bus(b: str, delta: int) -> str:
    return f"{int(b, 16) + delta:02x}"


def pci_device(tmp_path: Path, bdf: str) -> Path:
    """The /sys/devices directory of `bdf` in the fake tree (made on first use): a GPU's or a compute
    HCA's behind its PCIe switch (host bridge, root port, switch upstream port, downstream port:
    buses N-3, N-2, N-1 of the switch's NIC bus N), a storage HCA's straight on a root port."""
    bus = bdf.split(":")[1]
    base = tmp_path / "sys" / "devices"
    for gpu, nic in DGX_H100_RAILS.values():
        if bus in (gpu, nic):
            up, down = _bus(nic, -2), _bus(nic, -1)
            port = "00.0" if bus == nic else "03.0"
            d = (base / f"pci0000:{_bus(nic, -3)}" / f"0000:{_bus(nic, -3)}:01.0" / f"0000:{up}:00.0"
                 / f"0000:{down}:{port}" / bdf)
            break
    else:
        d = base / f"pci0000:{_bus(bus, -1)}" / f"0000:{_bus(bus, -1)}:01.0" / bdf
    d.mkdir(parents=True, exist_ok=True)
    return d


def place_hca(root: Path, dev: str, bdf: str | None) -> None:
    """`/sys/class/infiniband/<dev>/device`, the link the kernel makes to the HCA's PCI function; None
    removes it (a tree that does not show the topology)."""
    link = root / dev / "device"
    if link.is_symlink() or link.exists():
        link.unlink() if link.is_symlink() else shutil.rmtree(link)
    if bdf is not None:
        link.symlink_to(pci_device(root.parent, bdf))


def h100_pci(root: Path) -> Path:
    """gpud's tree placed on the DGX H100 topology: its eight InfiniBand HCAs, in name order, at the
    eight compute HCAs' PCI functions (mlx5_6 is GPU 4's), the BlueField bond at a storage slot's;
    the GPUs under /sys/bus/pci/devices. Returns that directory (ib_health's --pci-root)."""
    for i, dev in enumerate(("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9")):
        if (root / dev).exists():
            place_hca(root, dev, f"0000:{DGX_H100_RAILS[i][1]}:00.0")
    place_hca(root, "mlx5_bond_0", f"0000:{DGX_H100_STORAGE[1]}:00.0")
    devices = root.parent / "sys" / "bus" / "pci" / "devices"
    devices.mkdir(parents=True, exist_ok=True)
    for gpu, _ in DGX_H100_RAILS.values():
        (devices / f"0000:{gpu}:00.0").symlink_to(pci_device(root.parent, f"0000:{gpu}:00.0"))
    return devices


def h100_nvidia_smi(fake_tool) -> Path:
    """nvidia-smi answering the inventory query (`--query-gpu=index,name,uuid,pci.bus_id,driver_version
    --format=csv,noheader`) with the DGX H100's eight GPUs (bus ids as its nvidia-smi printed them,
    driver 535.161.08; UUIDs made up); the directory to put first on PATH."""
    rows = "\n".join(f"{i}, NVIDIA H100 80GB HBM3, GPU-00000000-0000-0000-0000-00000000000{i}, "
                     f"00000000:{gpu.upper()}:00.0, 535.161.08" for i, (gpu, _) in DGX_H100_RAILS.items())
    return fake_tool("nvidia-smi", f'case "$*" in *--query-gpu=*) printf \'{rows}\\n\' ;; '
                     '*) echo "fake nvidia-smi: $*" >&2; exit 2 ;; esac').parent


def ib_counter(root: Path, dev: str, name: str, value: int) -> None:
    (root / dev / "ports" / "1" / "counters" / name).write_text(f"{value}\n")


def roce_ib_tree(tmp_path: Path) -> Path:
    """gpud's ibstat output of an H100 RoCE node written as the sysfs files the kernel shows for it
    (drivers/infiniband/core/sysfs.c formats), with a netdev per port (names invented)."""
    import re

    root = tmp_path / "roce-sysfs"
    text = (FIXTURES / "ib" / "ibstat_h100_roce_some_down_polling_gpud.txt").read_text()
    for block in text.split("CA '")[1:]:
        dev = block.split("'", 1)[0]
        f = dict(re.findall(r"^\s+([A-Za-z ]+): (.*)$", block, re.M))
        port = root / dev / "ports" / "1"
        (port / "gid_attrs" / "ndevs").mkdir(parents=True)
        (root / dev / "hca_type").write_text(f["CA type"] + "\n")
        (root / dev / "fw_ver").write_text(f["Firmware version"] + "\n")
        for name, value in (("state", _IB_STATE[f["State"]]), ("phys_state", _IB_PHYS[f["Physical state"]]),
                            ("rate", _IB_RATE[f["Rate"]]), ("link_layer", f["Link layer"])):
            (port / name).write_text(value + "\n")
        (port / "gid_attrs" / "ndevs" / "0").write_text(f"ens{dev.split('_')[1]}np0\n")
    return root


@pytest.fixture
def h():
    """Helpers for test modules (pytest's importlib mode gives test files no sibling imports)."""
    return SimpleNamespace(
        FIXTURES=FIXTURES,
        SUITES_DIR=SUITES_DIR,
        ROOT=ROOT,
        PREFIX=PREFIX,
        fx=lambda *parts: FIXTURES.joinpath(*parts).read_text(),
        check_artifacts=check_artifacts,
        failing=failing,
        result_validator=result_validator,
        summary_validator=summary_validator,
        env=_env,
        dcgm4_document=dcgm4_document,
        h100_ib_tree=h100_ib_tree,
        roce_ib_tree=roce_ib_tree,
        ib_counter=ib_counter,
        h100_pci=h100_pci,
        place_hca=place_hca,
        h100_nvidia_smi=h100_nvidia_smi,
        DGX_H100_RAILS=DGX_H100_RAILS,
        DGX_H100_STORAGE=DGX_H100_STORAGE,
    )


@pytest.fixture(autouse=True)
def _clean_suite_env(monkeypatch):
    """In-process runs read the environment too: a developer's CLUSTER_DOCTOR_* must not leak in."""
    for k in list(os.environ):
        if k.startswith("CLUSTER_DOCTOR_") or k in ("NODE_NAME", "SLURMD_NODENAME", "NCCL_IB_HCA"):
            monkeypatch.delenv(k, raising=False)
