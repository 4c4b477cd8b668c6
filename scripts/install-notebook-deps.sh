#!/bin/sh
# install-notebook-deps.sh — install what the notebooks need on Debian/Ubuntu: Jupyter's
# nbconvert (to execute them), an IPython kernel and matplotlib, all as Debian packages for
# /usr/bin/python3. Installs only the packages that are missing; says which. Runs apt-get as
# root, or through sudo.
set -eu
PKGS="jupyter-nbconvert python3-nbformat python3-nbclient python3-ipykernel python3-matplotlib"
missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
missing=${missing# }
if [ -z "$missing" ]; then
    echo "install-notebook-deps: all present ($PKGS)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-notebook-deps: no apt-get here; install Jupyter nbconvert, ipykernel and matplotlib for /usr/bin/python3 yourself (missing: $missing)" >&2
    exit 1
fi
if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-notebook-deps: need root or sudo to install: $missing" >&2; exit 1
fi
echo "install-notebook-deps: installing $missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "install-notebook-deps: done ($(/usr/bin/python3 -c 'import matplotlib, nbconvert; print("matplotlib", matplotlib.__version__, "nbconvert", nbconvert.__version__)'))"
