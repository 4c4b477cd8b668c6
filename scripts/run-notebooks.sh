#!/bin/sh
# run-notebooks.sh — execute every notebooks/*.ipynb with Jupyter nbconvert into
# build/notebooks/ (the stored notebooks stay without outputs). The notebooks read results/,
# call build/zerocalc and write their figures to docs/img/*.png.
#
# Installs the Debian packages it needs when they are missing (scripts/install-notebook-deps.sh).
# The kernel is the Debian /usr/bin/python3 (the one those packages are for), through a
# kernelspec written under build/notebooks/, whatever `python3` on PATH is (pyenv, venv, ...).
# Every notebook is run even if one fails; the exit code is nonzero if any cell of any failed.
#
# Environment: NOTEBOOK_PYTHON (default /usr/bin/python3), NOTEBOOK_CELL_TIMEOUT (seconds per
# cell, default 120).
set -eu
cd "$(dirname "$0")/.."
PY=${NOTEBOOK_PYTHON:-/usr/bin/python3}
TIMEOUT=${NOTEBOOK_CELL_TIMEOUT:-120}
OUT=build/notebooks

have_deps() { [ -x "$PY" ] && "$PY" -c 'import nbconvert, nbclient, nbformat, ipykernel, matplotlib' 2>/dev/null; }
if ! have_deps; then
    scripts/install-notebook-deps.sh
    have_deps || { echo "run-notebooks: $PY still lacks nbconvert/ipykernel/matplotlib" >&2; exit 1; }
fi

# A kernelspec of our own, so that no user-level "python3" kernelspec can swap the interpreter.
KDIR="$OUT/jupyter/kernels/zerolab-python3"
mkdir -p "$KDIR"
cat > "$KDIR/kernel.json" <<EOF
{"argv": ["$PY", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
 "display_name": "zerolab ($PY)", "language": "python",
 "env": {"MPLBACKEND": "Agg"}}
EOF
JUPYTER_PATH="$(pwd)/$OUT/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"
export JUPYTER_PATH MPLBACKEND=Agg PYDEVD_DISABLE_FILE_VALIDATION=1

status=0
failed=""
t0=$(date +%s)
for nb in notebooks/*.ipynb; do
    [ -e "$nb" ] || { echo "run-notebooks: no notebooks/*.ipynb" >&2; exit 1; }
    t=$(date +%s)
    echo "run-notebooks: executing $nb"
    if "$PY" -m nbconvert --to notebook --execute \
            --ExecutePreprocessor.timeout="$TIMEOUT" \
            --ExecutePreprocessor.kernel_name=zerolab-python3 \
            --output-dir "$OUT" "$nb"; then
        echo "run-notebooks: ok     $nb -> $OUT/$(basename "$nb") ($(( $(date +%s) - t )) s)"
    else
        echo "run-notebooks: FAILED $nb (see the error above)" >&2
        status=1
        failed="$failed $nb"
    fi
done
echo "run-notebooks: $(( $(date +%s) - t0 )) s in all; figures in docs/img/"
if [ "$status" -ne 0 ]; then echo "run-notebooks: failed:$failed" >&2; fi
exit "$status"
