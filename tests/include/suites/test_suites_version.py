"""suite_version: the content hash the Airflow side computes the same way over the ConfigMap."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from cluster_doctor_suites import version


def reference_hash(directory: Path) -> str:
    """The algorithm exactly as specified, written independently of the implementation."""
    h = hashlib.sha256()
    names = sorted(
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file()
        and p.name.endswith((".py", ".yaml", ".yml", ".json"))
        and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(directory).parts)
    )
    for name in names:
        h.update(name.encode() + b"\0" + (directory / name).read_bytes() + b"\0")
    return "sha256:" + h.hexdigest()[:16]


def test_matches_the_specified_algorithm_on_the_real_folder(h):
    got = version.content_hash(h.SUITES_DIR)
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", got)
    assert got == reference_hash(h.SUITES_DIR)


def test_only_hashed_suffixes_in_the_package_and_its_subfolders(tmp_path):
    (tmp_path / "a.py").write_text("print(1)\n")
    (tmp_path / "b.yaml").write_text("x: 1\n")
    base = version.content_hash(tmp_path)
    (tmp_path / "README.md").write_text("docs")
    (tmp_path / "Dockerfile").write_text("FROM x")
    (tmp_path / "a.pyc").write_bytes(b"\0")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "c.py").write_text("ignored")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "d.py").write_text("ignored")
    assert version.content_hash(tmp_path) == base
    (tmp_path / "checkers").mkdir()
    (tmp_path / "checkers" / "x.py").write_text("x = 1\n")
    with_sub = version.content_hash(tmp_path)
    assert with_sub != base and "checkers/x.py" in version.package_files(tmp_path)
    (tmp_path / "checkers" / "x.py").unlink()
    (tmp_path / "c.json").write_text("{}")
    assert version.content_hash(tmp_path) != base
    (tmp_path / "c.json").unlink()
    (tmp_path / "a.py").write_text("print(2)\n")
    assert version.content_hash(tmp_path) != base


def test_configmap_mount_layout_hashes_like_the_flat_folder(tmp_path, h):
    """kubelet mounts a ConfigMap as symlinks into a hidden, timestamped ..data directory (subfolders
    included: the symlinked directories are followed)."""
    mount = tmp_path / "suites"
    data = mount / "..2026_11_22_04_00_00.123456789"
    data.mkdir(parents=True)
    for p in h.SUITES_DIR.iterdir():
        if p.is_file():
            shutil.copy(p, data / p.name)
        elif p.is_dir() and p.name != "__pycache__":
            shutil.copytree(p, data / p.name)
    os.symlink(data.name, mount / "..data")
    for p in data.iterdir():
        os.symlink(f"..data/{p.name}", mount / p.name)
    assert version.content_hash(mount) == version.content_hash(h.SUITES_DIR)


def test_env_override(monkeypatch):
    monkeypatch.setenv("CLUSTER_DOCTOR_SUITE_VERSION", "sha256:0000000000000001")
    assert version.suite_version() == "sha256:0000000000000001"
    monkeypatch.delenv("CLUSTER_DOCTOR_SUITE_VERSION")
    assert version.suite_version() == version.content_hash(Path(version.__file__).parent)
