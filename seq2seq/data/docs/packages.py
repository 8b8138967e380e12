"""Debian packages as raw material: fetch with `apt-get download`, record, unpack with `dpkg -x`.

Neither step needs root rights. A package's `.deb` is looked for in the raw folder first, so a
second build (or a package fetched by hand) never touches the network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from seq2seq.errors import UserError

# Downloads the named packages' .deb files into the folder; raises OSError or
# subprocess.CalledProcessError when it cannot.
Fetch = Callable[[Sequence[str], Path], None]

UNPACKED_MARKER = ".unpacked"
# Debian's Korean fonts (NanumGothic, Architecture: all): the heatmaps' Hangul labels
FONT_PACKAGE = "fonts-nanum"
FONT_FILE = "usr/share/fonts/truetype/nanum/NanumGothic.ttf"


@dataclass(frozen=True)
class Package:
    """One fetched Debian package.

    Attributes:
        name: the package name, e.g. manpages-de.
        version: its Debian version, e.g. 4.18.1-1.
        sha256: the hex sha256 of the .deb file.
        deb: the .deb file.
    """

    name: str
    version: str
    sha256: str
    deb: Path

    def record(self) -> dict[str, str]:
        """The manifest entry: name, version, sha256 and the .deb's file name."""
        return {"name": self.name, "version": self.version, "sha256": self.sha256,
                "deb": self.deb.name}


def apt_get_download(names: Sequence[str], raw_dir: Path) -> None:
    """The default fetch: `apt-get download NAMES` run inside `raw_dir`."""
    subprocess.run(["apt-get", "download", *names], cwd=raw_dir, check=True,
                   capture_output=True, text=True)


def find_deb(raw_dir: Path, name: str) -> Path | None:
    """The newest `<name>_*.deb` in `raw_dir` (by modification time), or None."""
    debs = sorted(raw_dir.glob(f"{name}_*.deb"), key=os.path.getmtime)
    return debs[-1] if debs else None


def fetch_command(names: Sequence[str], raw_dir: Path) -> str:
    """The shell command that fetches `names` by hand."""
    return f"cd {raw_dir} && apt-get download {' '.join(names)}"


def obtain_packages(
    names: Sequence[str], raw_dir: Path, *, fetch: Fetch, allow_missing: bool
) -> tuple[dict[str, Package], list[str]]:
    """Find or fetch every package and describe it.

    Args:
        names: the package names.
        raw_dir: the folder holding the .deb files (created when missing).
        fetch: downloads the .deb files that are not in `raw_dir` yet.
        allow_missing: go on without the packages that cannot be fetched instead of failing.

    Returns:
        name -> Package for each package at hand, and the names of the missing ones (empty
        unless `allow_missing`).

    Raises:
        UserError: a package could not be fetched and `allow_missing` is false; one line that
            names the packages and the command to fetch them by hand.
    """
    raw_dir.mkdir(parents=True, exist_ok=True)
    absent = [name for name in names if find_deb(raw_dir, name) is None]
    errors: dict[str, str] = {}
    if absent:
        print(f"fetching Debian packages: apt-get download {' '.join(absent)} (into {raw_dir})")
        try:
            fetch(absent, raw_dir)
        except (OSError, subprocess.CalledProcessError) as err:
            errors = dict.fromkeys(absent, _last_line(err))
            if len(absent) > 1:  # one unknown name fails the whole call: find the culprits
                for name in absent:
                    if find_deb(raw_dir, name) is None:
                        try:
                            fetch([name], raw_dir)
                        except (OSError, subprocess.CalledProcessError) as one_err:
                            errors[name] = _last_line(one_err)
    missing = [name for name in names if find_deb(raw_dir, name) is None]
    if missing and not allow_missing:
        detail = "; ".join(f"{name}: {errors.get(name, 'no .deb left behind')}"
                           for name in missing)
        raise UserError(
            f"Debian package(s) {', '.join(missing)} missing from {raw_dir} and could not be "
            f"fetched ({detail}); fetch by hand with `{fetch_command(missing, raw_dir)}` "
            "(after `apt-get update` as root if apt knows no such package), or set "
            "data.allow_missing=true to build from the other packages"
        )
    packages = {}
    for name in names:
        deb = find_deb(raw_dir, name)
        if deb is not None:
            packages[name] = Package(name, deb_version(deb), _sha256(deb), deb)
    return packages, missing


def obtain_font(raw_dir: Path, *, fetch: Fetch) -> Path | None:
    """Fetch (once) and unpack FONT_PACKAGE into `raw_dir`, beside a Korean corpus's packages,
    so its heatmaps draw Hangul (`fonts.cjk_font` finds it there, offline).

    Returns:
        The font file, or None after one line saying why (the corpus builds without it).
    """
    try:
        packages, _ = obtain_packages([FONT_PACKAGE], raw_dir, fetch=fetch, allow_missing=False)
        return unpack(packages[FONT_PACKAGE], raw_dir) / FONT_FILE
    except UserError as err:
        print(f"no {FONT_PACKAGE}: Korean heatmap labels draw as boxes unless a CJK font is "
              f"installed; {str(err).splitlines()[0]}")
        return None


def deb_version(deb: Path) -> str:
    """The package version a .deb declares (`dpkg-deb --field`)."""
    try:
        result = subprocess.run(["dpkg-deb", "--field", str(deb), "Version"], check=True,
                                capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as err:
        raise UserError(f"{deb}: cannot read the package version ({_last_line(err)}); delete "
                        "the file (a broken download) and run again") from None
    return result.stdout.strip()


def unpack(package: Package, raw_dir: Path) -> Path:
    """The package's files, unpacked once with `dpkg -x` into `raw_dir/<deb name>/`.

    Returns:
        The unpacked root (it holds `usr/...`).
    """
    target = raw_dir / package.deb.name.removesuffix(".deb")
    if (target / UNPACKED_MARKER).is_file():
        return target
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        subprocess.run(["dpkg", "-x", str(package.deb), str(tmp)], check=True,
                       capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"{package.deb}: dpkg -x failed ({_last_line(err)}); delete the file "
                        f"and fetch it again with `{fetch_command([package.name], raw_dir)}`"
                        ) from None
    (tmp / UNPACKED_MARKER).write_text(package.sha256 + "\n", encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _last_line(err: BaseException) -> str:
    stderr = getattr(err, "stderr", None)
    lines = [line for line in (stderr or "").strip().splitlines() if not line.startswith("W:")]
    return lines[-1] if lines else str(err)
