import importlib

import pytest
from cluster_doctor.domain import suites
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import suite_code


def test_catalog_lists_the_four_suites_with_image_resources_and_timeouts():
    settings = Settings()
    assert set(suites.CATALOG) == {"dl_unit", "nccl_loopback", "storage_fio", "gpu_health"}
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

    assert suite_code.content_hash(suites.DEFAULT_SUITES_DIR) == version.content_hash(suites.DEFAULT_SUITES_DIR)
    (tmp_path / "a.py").write_text("print(1)\n")
    (tmp_path / "b.yaml").write_text("x: 1\n")
    (tmp_path / "notes.txt").write_text("not shipped")
    assert suite_code.content_hash(tmp_path) == version.content_hash(tmp_path)
    before = suite_code.content_hash(tmp_path)
    (tmp_path / "a.py").write_text("print(2)\n")
    assert suite_code.content_hash(tmp_path) != before


def test_shipped_files_are_flat_and_fit_a_configmap():
    files = suite_code.shipped_files(suites.DEFAULT_SUITES_DIR)
    assert "__init__.py" in files and "baselines.yaml" in files and "result.schema.json" in files
    assert all("/" not in name for name in files)
    assert sum(len(v) for v in files.values()) < suite_code.CONFIGMAP_LIMIT


def test_unknown_suite():
    with pytest.raises(ValueError, match="unknown suite 'x'"):
        suites.get("x")
