"""The shape of the package: no import cycle (function-local imports included), the command-line
tools for inference never load the training package, and no module grows past 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "seq2seq"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its body (and their packages,
    whose __init__ runs first)."""
    mods = modules()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                target = owner(name) if name.startswith("seq2seq") else None
                if target is None or target == mod:
                    continue
                graph[mod].add(target)  # what it uses; the packages on the way run too:
                parent = target.rpartition(".")[0]
                while parent and parent != mod and not mod.startswith(parent + "."):
                    graph[mod].add(parent)
                    parent = parent.rpartition(".")[0]
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_no_import_cycle() -> None:
    graph = import_graph()
    cycles = sorted(m for m in graph if m in reachable(graph, m))
    assert not cycles, f"modules on an import cycle: {cycles}"


@pytest.mark.parametrize("tool", ["seq2seq.inference", "seq2seq.evaluate", "seq2seq.translate"])
def test_inference_tools_do_not_load_the_training_package(tool: str) -> None:
    reached = reachable(import_graph(), tool)
    training = sorted(m for m in reached if m.startswith("seq2seq.training"))
    assert not training, f"{tool} imports {training}"


def test_no_module_over_400_lines() -> None:
    lengths = {p.relative_to(ROOT).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
               for p in PACKAGE.rglob("*.py")}
    assert {path: n for path, n in lengths.items() if n > 400} == {}


def test_the_graph_sees_function_local_imports() -> None:
    """data/__init__ imported its sources inside a function once: such edges count."""
    graph = import_graph()
    assert "seq2seq.training.loop" in graph["seq2seq.train"]  # imported inside main()
