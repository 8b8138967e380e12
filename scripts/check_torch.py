"""Whether the running interpreter's torch is recent enough for this project.

`PYTHON scripts/check_torch.py` prints one line and exits 0 when PYTHON's torch is at least
MIN_TORCH, 1 when it is older or missing. `--version V` judges V in place of the torch found
(how the refusal is tested without an old torch). The offline install runs it first.
"""

from __future__ import annotations

import argparse
import re
import sys

# the newest API the code needs: torch.amp.GradScaler(device) (seq2seq/runtime.py), from 2.3
MIN_TORCH = (2, 3)


def release(version: str) -> tuple[int, ...]:
    """The leading numbers of a torch version: "2.11.0+cu130" -> (2, 11, 0)."""
    found = re.match(r"\d+(\.\d+)*", version)
    if found is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in found.group().split("."))


def verdict(version: str) -> tuple[bool, str]:
    """Whether `version` will do, and the one line that says so."""
    floor = ".".join(map(str, MIN_TORCH))
    if release(version) < MIN_TORCH:
        return False, (f"torch {version} at {sys.executable} is older than {floor}, the oldest "
                       "this project runs on: use an interpreter with a newer torch")
    return True, f"torch {version} at {sys.executable}: recent enough (>= {floor})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", help="judge this version instead of the importable torch")
    args = parser.parse_args(argv)
    version = args.version
    if version is None:
        try:
            import torch
        except ImportError as err:
            print(f"{sys.executable} cannot import torch ({err}): the offline install uses the "
                  "interpreter's own torch")
            return 1
        version = torch.__version__
    ok, line = verdict(version)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
