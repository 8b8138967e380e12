"""A folder of wheels of everything the project needs except torch, for one Python version.

For a machine that has torch but no package registry (the lent H200): build the wheelhouse
here, carry it there, and `make install-offline` installs from it alone. Run with Python 3.11+
(tomllib) where the registry is reachable:

    python3 scripts/wheelhouse.py [--python 3.12] [--extras sweep,serve] \
        [--exclude scripts/preinstalled/h200.txt \
         --fallbacks scripts/preinstalled/h200-fallbacks.txt]

--python names the target interpreter (a path, or a version found on PATH or under pyenv); its
own pip resolves the requirements for it and builds the sdists among them into wheels
(antlr4-python3-runtime, and eflomal with --extras align, compiled for this machine's CPU).
The wheels go to wheelhouse/cpXY with requirements.txt, what install-offline installs.
--exclude FILE (one distribution name a line, what the target already has) writes the wheels
not named there to wheelhouse/cpXY-STEM as well, with the same requirements.txt: the target's
own packages satisfy the rest. Pure-Python wheels stay even when named (they are small): pip
takes one only where the target's own version misses a bound (datasets' on fsspec, say).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
# torch comes from the target interpreter: never resolved, so never downloaded (a CUDA build of
# it is gigabytes). A requirement on it anywhere in the tree makes the resolution fail instead.
NEVER = "torch"


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): "PyYAML" -> "pyyaml"."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """The distribution a requirement names: "hydra-core>=1.3" -> "hydra-core"."""
    return canonical(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip()).group())


def wheel_name(wheel: Path) -> str:
    """The distribution a wheel file holds: "PyYAML-6.0-cp312-....whl" -> "pyyaml"."""
    return canonical(wheel.name.split("-")[0])


def wheel_tag(wheel: Path) -> str:
    """A wheel file's tag: "py3-none-any", "cp312-cp312-manylinux_2_28_x86_64"."""
    return "-".join(wheel.name.removesuffix(".whl").split("-")[-3:])


def carried(name: str, tags: list[str], target_has: set[str]) -> bool:
    """Whether a wheel goes to a target that has the distributions `target_has`: unless the
    target has it and the wheel is built for a platform; a pure-Python one (tags all *-none-any)
    is small and serves where the target's own version misses a bound."""
    return canonical(name) not in target_has or all(t.endswith("-none-any") for t in tags)


def requirements(extras: list[str]) -> list[str]:
    """The project's build requirements, dependencies and the named extras', torch left out."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    optional = pyproject["project"]["optional-dependencies"]
    unknown = sorted(set(extras) - set(optional))
    if unknown:
        raise SystemExit(f"no such extra: {', '.join(unknown)} (pyproject.toml has "
                         f"{', '.join(optional)})")
    found = [*pyproject["build-system"]["requires"], *pyproject["project"]["dependencies"]]
    found += [req for extra in extras for req in optional[extra]]
    return [req for req in found if requirement_name(req) != NEVER]


def interpreter(spec: str) -> tuple[str, str]:
    """The target interpreter's path and wheel tag ("cp312") from a path or a version."""
    candidates = [spec] if "/" in spec else [
        *sorted(map(str, (Path.home() / ".pyenv" / "versions").glob(f"{spec}*/bin/python")),
                reverse=True),
        f"python{spec}",
    ]
    for path in candidates:
        try:
            tag = subprocess.run([path, "-c", "import sys; print(f'cp{sys.version_info[0]}"
                                  "{sys.version_info[1]}', sys.version.split()[0])"],
                                 capture_output=True, text=True, check=True).stdout.split()
        except (OSError, subprocess.CalledProcessError):
            continue
        if "/" in spec or tag[1] == spec or tag[1].startswith(f"{spec}."):
            return path, tag[0]
    raise SystemExit(f"no Python {spec} found (tried {', '.join(candidates)})")


def listed(path: Path) -> set[str]:
    """The distribution names of a file of them, one a line ('#' starts a comment)."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {canonical(line) for line in lines if line}


def size_mib(wheels: list[Path]) -> float:
    """The wheels' total size in MiB."""
    return sum(w.stat().st_size for w in wheels) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the target interpreter: a path or a version (default: this one)")
    parser.add_argument("--extras", default="", help="comma-separated extras of pyproject.toml")
    parser.add_argument("--exclude", type=Path,
                        help="a file of distribution names the target already has")
    parser.add_argument("--fallbacks", type=Path,
                        help="with --exclude: a file of pinned requirements whose wheels (no "
                             "dependencies) join the subset, for pip to fall back on where the "
                             "target's own packages miss the newest wheels' bounds")
    parser.add_argument("--out", type=Path, default=ROOT / "wheelhouse")
    args = parser.parse_args(argv)

    python, tag = interpreter(args.python)
    reqs = requirements([e for e in args.extras.split(",") if e.strip()])
    full = args.out / tag
    full.mkdir(parents=True, exist_ok=True)
    for old in full.glob("*.whl"):  # one version of each: wheels of an earlier run go
        old.unlink()
    (full / "requirements.txt").write_text("\n".join(reqs) + "\n")
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as guard:
        guard.write(f"{NEVER}<0\n")  # no version satisfies it
        guard.flush()
        subprocess.run([python, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(full),
                        "-r", str(full / "requirements.txt"), "--constraint", guard.name],
                       check=True)
    wheels = sorted(full.glob("*.whl"))
    print(f"{full}: {len(wheels)} wheels, {size_mib(wheels):.1f} MiB")

    if args.exclude is not None:
        names = listed(args.exclude)
        subset = args.out / f"{tag}-{args.exclude.stem}"
        shutil.rmtree(subset, ignore_errors=True)
        subset.mkdir()
        shutil.copy(full / "requirements.txt", subset)
        kept = [w for w in wheels if carried(wheel_name(w), [wheel_tag(w)], names)]
        for wheel in kept:
            shutil.copy(wheel, subset)
        if args.fallbacks is not None:
            subprocess.run([python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
                            str(subset), "-r", str(args.fallbacks)], check=True)
            kept = sorted(subset.glob("*.whl"))
        left_out = sorted(wheel_name(w) for w in wheels if canonical(wheel_name(w)) in names
                          and not carried(wheel_name(w), [wheel_tag(w)], names))
        print(f"{subset}: {len(kept)} wheels, {size_mib(kept):.1f} MiB; left out, as the target "
              f"has them ({args.exclude}): {' '.join(left_out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
