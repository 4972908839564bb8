import importlib

import pytest
from cluster_doctor.domain import suites
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import suite_code


def test_catalog_lists_the_suites_with_image_resources_and_timeouts():
    settings = Settings()
    assert set(suites.CATALOG) == {"dl_unit", "nccl_loopback", "storage_fio", "gpu_health", "nvbandwidth", "ib_health",
                                   "fabric_peer"}
    assert suites.PEER_SUITES == ("fabric_peer",)  # between two nodes: planned by peer cadence, never in `tests`
    assert set(settings.suite_timeouts_s) == set(suites.CATALOG)  # each its own budget, none the fallback
    # the fabric suites are in the catalog, enabled by a deployment's `tests`, not by default
    assert settings.tests == ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"]
    for suite in suites.CATALOG.values():
        assert suite.image(settings) == settings.image
        assert suite.cpu and suite.memory and suite.key_metrics
        assert settings.suite_timeout(suite.name) > 0
        assert suite.command(settings)[:3] == ["python", "-m", f"cluster_doctor_suites.{suite.name}"]


def test_every_catalog_module_exists_in_include_suites():
    for suite in suites.CATALOG.values():
        assert importlib.util.find_spec(suite.module) is not None, suite.module


def test_suite_version_matches_the_suites_own_algorithm(tmp_path):
    from cluster_doctor_suites import version

    mount = tmp_path / "mount"
    tmp_path = tmp_path / "src"
    tmp_path.mkdir()
    assert suite_code.content_hash(suites.DEFAULT_SUITES_DIR) == version.content_hash(suites.DEFAULT_SUITES_DIR)
    (tmp_path / "a.py").write_text("print(1)\n")
    (tmp_path / "b.yaml").write_text("x: 1\n")
    (tmp_path / "notes.txt").write_text("not shipped")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.py").write_text("print(3)\n")
    assert suite_code.content_hash(tmp_path) == version.content_hash(tmp_path)
    before = suite_code.content_hash(tmp_path)
    (tmp_path / "sub" / "c.py").write_text("print(4)\n")  # a file of a subfolder counts
    assert suite_code.content_hash(tmp_path) != before
    # the ConfigMap as mounted (keys projected back to paths) hashes like the source folder
    for name, content in suite_code.shipped_files(tmp_path).items():
        (mount / name).parent.mkdir(parents=True, exist_ok=True)
        (mount / name).write_bytes(content)
    assert version.content_hash(mount) == suite_code.content_hash(tmp_path)


def test_shipped_files_are_valid_configmap_keys_and_fit_a_configmap():
    files = suite_code.shipped_files(suites.DEFAULT_SUITES_DIR)
    assert "__init__.py" in files and "baselines.yaml" in files and "result.schema.json" in files
    assert "checkers/xid.py" in files and "harness/runner.py" in files  # subfolders ship too
    keys = [suite_code.configmap_key(name) for name in files]
    assert len(set(keys)) == len(keys) and "checkers__xid.py" in keys
    assert sum(len(v) for v in files.values()) < suite_code.CONFIGMAP_LIMIT


def test_a_file_name_that_is_no_configmap_key_is_refused():
    with pytest.raises(ValueError, match="cannot be a ConfigMap key"):
        suite_code.configmap_key("checkers/bad name.py")


def test_unknown_suite():
    with pytest.raises(ValueError, match="unknown suite 'x'"):
        suites.get("x")
