#!/usr/bin/env bash
# .venv on an interpreter's own torch (and its other packages), the rest from a wheelhouse, with
# no package registry at all: for a machine that has torch but nothing to download from.
#
# Usage: scripts/install_offline.sh PYTHON WHEELS   (make install-offline PYTHON=... WHEELS=...)
#   PYTHON  the interpreter whose torch is used, e.g. /opt/torch/.venv/bin/python3
#   WHEELS  a folder made by scripts/wheelhouse.py for PYTHON's version (with requirements.txt)
# Afterwards .venv/bin/python works as after the normal install, and make's stamp
# .venv/.installed is written, so `make test` and the rest use this .venv as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/install_offline.sh PYTHON WHEELS"
python="${1:?$usage}"
wheels="${2:?$usage}"

"$python" scripts/check_torch.py
if [[ ! -f "$wheels/requirements.txt" ]]; then
    echo "no $wheels/requirements.txt: build the wheelhouse with make wheelhouse" >&2
    exit 2
fi
if [[ -e .venv ]]; then
    echo ".venv exists: remove it first (rm -rf .venv)" >&2
    exit 2
fi

# The venv sees PYTHON's packages, torch among them, through a .pth file that adds PYTHON's
# site-packages (their own .pth files processed) after its own: --system-site-packages would
# reach only the base interpreter's, not those of a venv that PYTHON belongs to. Where the base
# interpreter lacks ensurepip (Debian without python3-venv), PYTHON's own pip serves, so found.
if ! "$python" -m venv .venv; then
    "$python" -m venv --clear --without-pip .venv
fi
site_packages="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
"$python" -c 'import site; print("import site; " + "; ".join(
    f"site.addsitedir({p!r})" for p in site.getsitepackages()))' \
    > "$site_packages/interpreter_packages.pth"

# pip with no configuration, no index and no find-links but WHEELS: nothing can be downloaded.
pip() {
    env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_CONSTRAINT \
        PIP_CONFIG_FILE=/dev/null .venv/bin/python -m pip "$@"
}
pip install --quiet --no-index --find-links "$wheels" -r "$wheels/requirements.txt"
# The project without its dependencies (installed just above): its exact torch pin names the
# CPU wheel of the normal install, and PYTHON's torch is another version.
pip install --quiet --no-index --no-build-isolation --no-deps -e .
.venv/bin/python -c 'import torch, seq2seq.train
print(f"offline .venv ready: torch {torch.__version__} from {torch.__path__[0]}")'
touch .venv/.installed
