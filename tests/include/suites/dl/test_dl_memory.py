"""dl/memory.py: a stuck bit through the suite on a CPU virtual device, and the pure judging of the
pattern test and of memory already in use."""

from __future__ import annotations

import torch
from cluster_doctor_suites import dl_unit
from cluster_doctor_suites.dl import memory
from cluster_doctor_suites.dl.devices import Dev, current_device
from cluster_doctor_suites.dl.memory import InUse, PatternTest

from tests.support.dl_faults import statuses


def test_a_stuck_bit_fails_the_pattern_test_naming_chunk_and_polarity(run_inproc, monkeypatch, h):
    orig = torch.Tensor.bitwise_not_
    calls = {"n": 0}

    def stuck(self):
        out = orig(self)
        if current_device() == "cpu:1":
            calls["n"] += 1
            if calls["n"] == 3:  # the third chunk written inverted: one bit that does not flip
                self.view(-1)[123].bitwise_xor_(1 << 3)
        return out

    monkeypatch.setattr(torch.Tensor, "bitwise_not_", stuck)
    ns = run_inproc(dl_unit, "--device", "cpu", "--only", "memory", "--cpu-memory-mib", "40")
    h.check_artifacts(ns, status="fail", suite="dl_unit")
    assert statuses(ns, "memory_pattern") == {"cpu:0": "pass", "cpu:1": "fail"}
    (bad,) = h.failing(ns, "memory_pattern")
    assert bad["value"] == 1 and bad["code"] == "MEMORY_PATTERN_ERROR"
    assert "first in chunk 2 (16 MiB offset), polarity inverted" in bad["message"]
    assert ns.result["metrics"]["memory_tested_gib.cpu1"] == 32 / 1024  # 4 chunks of 8 MiB


def test_the_pattern_test_reads_back_what_it_wrote_on_the_cpu():
    dev = Dev("cpu:0", torch.device("cpu"), {"name": "cpu"})
    r = memory.pattern_test(torch, dev, 40 << 20)
    assert (r.bad_words, r.first_bad, r.oom) == (0, None, None)
    assert r.tested_gib == 32 / 1024 and r.target_bytes == 40 << 20


def _pattern(**kw):
    base = dict(device="cuda:0", where=" (00000000:18:00.0)", target_bytes=70 << 30, tested_gib=69.0, bad_words=0,
                first_bad=None, oom=None)
    return PatternTest(**{**base, **kw})


def test_pattern_results_fail_error_warn_and_pass():
    (c,) = memory.to_checks(_pattern(bad_words=2, first_bad="chunk 9 (2304 MiB offset), polarity plain")).checks
    assert (c.status, c.code, c.value) == ("fail", "MEMORY_PATTERN_ERROR", 2)
    assert c.message == ("2 32-bit word(s) read back wrong in 69 GiB, first in chunk 9 (2304 MiB offset), "
                         "polarity plain (00000000:18:00.0)")
    (c,) = memory.to_checks(_pattern(tested_gib=0.0, oom="CUDA out of memory")).checks
    assert (c.status, c.code, c.message) == ("error", "MEMORY_TEST_SHORT", "could not allocate memory to test (CUDA out of memory)")
    (c,) = memory.to_checks(_pattern(tested_gib=20.0, oom="CUDA out of memory")).checks
    assert (c.status, c.code) == ("warn", "MEMORY_TEST_SHORT") and "allocation stopped early: CUDA out of memory" in c.message
    judged = memory.to_checks(_pattern())
    assert [c.status for c in judged.checks] == ["pass"]
    assert [(m.key, m.value) for m in judged.metrics] == [("memory_tested_gib.cuda0", 69.0)]


def test_memory_in_use_before_the_test_is_a_warning():
    gib = 2**30
    judged = memory.in_use_checks(InUse("cuda:1", "", free_bytes=70 * gib, total_bytes=80 * gib))
    (c,) = judged.checks
    assert (c.name, c.status, c.value) == ("memory_in_use", "warn", 10.0)
    assert c.message == "10 GiB of 80 GiB already in use before the test (another process?)"
    assert [(m.key, m.value) for m in judged.metrics] == [("memory_in_use_gib.cuda1", 10.0)]
    assert memory.in_use_checks(InUse("cuda:1", "", free_bytes=79 * gib, total_bytes=80 * gib)).checks == []
