"""README is the guide to today's main: its Layout names every module and only what exists, its
command table names only real entry points and make targets (and every one of them), its
configuration table the config tree as it is; scripts/README.md indexes every script."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FILE = re.compile(r"[\w-]+\.(?:py|yaml|sh|md)\b")


def section(text: str, heading: str) -> str:
    """The body of the `## heading` section."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README has no '## {heading}' section"
    return match.group(1)


def layout() -> list[tuple[Path, list[str], list[str]]]:
    """Layout's code block: each line's path (relative to the root), and the file names and
    folder names (`docs/`) its description gives, which lie in that folder (the path's own
    folder for a file)."""
    block = re.search(r"```\n(.*?)```", section(README, "Layout"), re.S)
    assert block
    rows = []
    for line in block.group(1).splitlines():
        path, _, described = line.partition(" ")
        rows.append((Path(path), FILE.findall(described), re.findall(r"\b([\w-]+)/", described)))
    return rows


def named_in_layout() -> tuple[set[Path], set[Path]]:
    """(the files and folders the Layout names, the folders it names as a whole)."""
    named, wholes = set(), set()
    for path, files, folders in layout():
        folder = ROOT / path if path.name == "" or (ROOT / path).is_dir() else (ROOT / path).parent
        named |= {ROOT / path} | {folder / name for name in files + folders}
        wholes |= {folder / name for name in folders}
    return named, wholes


def test_every_path_the_layout_names_exists() -> None:
    missing = sorted(str(p.relative_to(ROOT)) for p in named_in_layout()[0] if not p.exists())
    assert not missing, f"README's Layout names what is not in the tree: {missing}"


def test_the_layout_names_every_module_and_top_level_config() -> None:
    named, wholes = named_in_layout()
    files = [p for p in (ROOT / "seq2seq").rglob("*.py") if p.name != "__init__.py"]
    files += list((ROOT / "configs").glob("*.yaml"))
    unnamed = sorted(str(p.relative_to(ROOT)) for p in files
                     if p not in named and not wholes & set(p.parents))
    assert not unnamed, f"README's Layout does not name: {unnamed}"


def commands() -> str:
    return section(README, "Commands")


def test_every_python_module_command_is_an_entry_point_with_a_main() -> None:
    modules = set(re.findall(r"python -m seq2seq\.(\w+)", README))
    assert {"train", "evaluate", "translate", "prepare", "compare"} <= modules
    for name in modules:
        source = (ROOT / "seq2seq" / f"{name}.py").read_text(encoding="utf-8")
        assert "\ndef main(" in source, f"seq2seq/{name}.py has no main()"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    scripts = {target.split(":")[0].removeprefix("seq2seq.")
               for target in pyproject["project"]["scripts"].values()}
    listed = set(re.findall(r"python -m seq2seq\.(\w+)", commands()))
    assert scripts == listed, "the Commands table and pyproject's console scripts differ"


def test_every_make_target_is_documented_and_every_documented_one_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    documented_targets = set(re.findall(r"^([a-z-]+):.*## ", makefile, re.M))
    in_readme = set(re.findall(r"`make ([a-z-]+)", README))
    in_readme |= {t for cell in re.findall(r"`make ([a-z-]+(?:`, `make [a-z-]+)*)`", README)
                  for t in re.findall(r"[a-z-]+", cell.replace("make", ""))}
    assert in_readme <= documented_targets, in_readme - documented_targets
    assert documented_targets - {"help"} <= in_readme | {"help"}, documented_targets - in_readme


def expand(option: str) -> list[str]:
    """`docs_de_en_{vanilla,luong}` -> the names it stands for."""
    parts = re.split(r"\{([^}]*)\}", option)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(combo) for combo in itertools.product(*choices)]


def test_the_configuration_table_is_the_config_tree() -> None:
    rows = re.findall(r"^\| `(\w+)/` \| (.*) \|$", section(README, "Configuration"), re.M)
    groups = {p.name for p in (ROOT / "configs").iterdir() if p.is_dir()}
    assert {group for group, _ in rows} == groups
    for group, cell in rows:
        named = {name for option in re.findall(r"`([\w{},]+)`", cell) for name in expand(option)}
        present = {p.stem for p in (ROOT / "configs" / group).glob("*.yaml")}
        assert present <= named, f"configs/{group}/ holds {present - named}, not in README"
        assert named <= present, f"README names configs/{group}/{named - present}, not there"


def test_scripts_readme_indexes_every_script() -> None:
    index = (ROOT / "scripts" / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w/.-]+\.(?:py|sh))`", index))
    present = {str(p.relative_to(ROOT / "scripts")) for p in (ROOT / "scripts").rglob("*")
               if p.suffix in (".py", ".sh")}
    assert named == present, (f"unindexed: {sorted(present - named)}, "
                              f"missing: {sorted(named - present)}")
