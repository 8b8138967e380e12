"""The offline install's parts that run without a registry: the torch floor's one-line refusal,
the wheelhouse's requirement set, and the H200's list of what it has against the project's
dependency tree (read from the distributions installed here); the device check's deadline."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "scripts" / "preinstalled" / "h200.txt"
_spec = importlib.util.spec_from_file_location("wheelhouse", ROOT / "scripts" / "wheelhouse.py")
wheelhouse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheelhouse)
canonical, carried, listed, requirements = (
    wheelhouse.canonical, wheelhouse.carried, wheelhouse.listed, wheelhouse.requirements)


def check_torch(python: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, str(ROOT / "scripts" / "check_torch.py"), *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("version", ["2.2.1", "1.13.0+cu117", "2.2.0a0+git1234"])
def test_an_older_torch_is_refused_in_one_line(version: str) -> None:
    done = check_torch(sys.executable, "--version", version)
    assert done.returncode == 1
    (line,) = (done.stdout + done.stderr).splitlines()
    assert f"torch {version} at " in line and "older than 2.3" in line


@pytest.mark.parametrize("version", ["2.3.0", "2.11.0+cu130", "2.13.0"])
def test_a_recent_torch_is_taken(version: str) -> None:
    done = check_torch(sys.executable, "--version", version)
    assert done.returncode == 0, done.stdout
    assert "recent enough" in done.stdout


def test_the_torch_installed_here_is_taken() -> None:
    import torch

    done = check_torch(sys.executable)
    assert done.returncode == 0 and done.stdout.startswith(f"torch {torch.__version__} at ")


def test_the_offline_install_stops_at_an_interpreter_without_torch(tmp_path: Path) -> None:
    """A venv of this interpreter, without its packages: no torch, one line, nothing built."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True, timeout=120)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "install_offline.sh"),
                           str(tmp_path / "bare" / "bin" / "python"), str(tmp_path / "wheels")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    (line,) = (done.stdout + done.stderr).splitlines()
    assert "cannot import torch" in line


def test_the_wheelhouse_requirements_leave_out_torch_alone() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    reqs = requirements(["sweep", "serve"])
    assert "torch" not in {canonical(Requirement(r).name) for r in reqs}
    for name in ("sentencepiece", "datasets", "hydra-core", "setuptools", "ctranslate2",
                 "hydra-optuna-sweeper"):
        assert any(canonical(Requirement(r).name) == name for r in reqs), name
    assert all(f'"{r}"' in pyproject for r in reqs)
    with pytest.raises(SystemExit, match="no such extra: gpu"):
        requirements(["gpu"])


def dependency_tree(requirement_lines: list[str]) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions these requirements need, theirs included, by name."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [Requirement(line) for line in requirement_lines]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if canonical(req.name) not in found:
            dist = importlib.metadata.distribution(req.name)
            found[canonical(req.name)] = dist
            todo += [Requirement(line) for line in dist.requires or []]
    return found


def test_the_h200_wheelhouse_carries_what_that_machine_lacks_and_one_compiled_wheel() -> None:
    """Every dependency is either carried to the H200 or one it has; of the compiled ones (the
    big ones, built per Python version) only rapidfuzz travels. Another compiled dependency
    the H200 lacks: check that `make wheelhouse` still fits what travels, then name it here."""
    has = listed(H200)
    assert {"torch", "numpy", "pyarrow", "pandas", "sentencepiece", "pytest"} <= has
    tree = dependency_tree(requirements([]))
    assert "torch" not in tree and {"datasets", "hydra-core", "antlr4-python3-runtime"} <= set(tree)
    tags = {name: [line.split(":", 1)[1].strip()
                   for line in (dist.read_text("WHEEL") or "").splitlines()
                   if line.startswith("Tag:")] or ["py3-none-any"]
            for name, dist in tree.items()}
    travels = {name for name in tree if carried(name, tags[name], has)}
    assert set(tree) - travels <= has
    compiled = {name for name in travels if not all(t.endswith("-none-any") for t in tags[name])}
    assert compiled == {"rapidfuzz"}


def test_the_device_check_names_the_stages_its_deadline_left_no_time_for(tmp_path: Path) -> None:
    """scripts/gpu_check.sh within DEADLINE: a stage with no time left is not started but named
    as failed (a rerun names it in STAGES), and the figures stage still writes its record."""
    if not (ROOT / ".venv/bin/python").is_file():
        pytest.skip("gpu_check.sh runs .venv's interpreter, and there is no .venv here")
    env = {**os.environ, "DEVICE": "cpu", "DEADLINE": "5", "STAGES": "tests compare compare_ko"}
    proc = subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh"), str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "out/gpu_check.json").read_text())
    assert summary["failed_stages"] == ["collect", "pytest_gpu", "compare", "compare_ko"]
    assert summary["environment"] is not None  # the environment stage ran before the deadline
    assert summary["compare_debian_en_ko"] is None  # the en→ko stage is one of the check's
    assert "collect: not run, 5s deadline reached" in proc.stdout
    assert "compare: not run, " in proc.stdout and "compare_ko: not run, " in proc.stdout
    assert "FAILED: collect pytest_gpu compare compare_ko" in proc.stderr
