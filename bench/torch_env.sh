# torch_env.sh — sourced by bench_model.sh and bench_train.sh: the PyTorch
# builds to compare with, in TORCH_PYS (python interpreters that import torch):
# the current PyTorch from PyPI in a venv of its own (HSI_BENCH_TORCH_VENV,
# default build/bench-venv-torch; the CPU wheel index first, then PyPI's
# default wheel, which carries CUDA libraries and runs on the CPU all the same),
# then Debian's python3-torch. Either may be missing; none means no ratio.
TORCH_VENV=${HSI_BENCH_TORCH_VENV:-build/bench-venv-torch}
if [ ! -x "$TORCH_VENV/bin/python" ] && [ -z "${HSI_BENCH_NO_PYPI:-}" ]; then
    mkdir -p "$(dirname "$TORCH_VENV")"
    echo "bench: installing PyTorch from PyPI into $TORCH_VENV (once; HSI_BENCH_NO_PYPI=1 skips it)" >&2
    /usr/bin/python3 -m venv "$TORCH_VENV" &&
        { "$TORCH_VENV/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu 2>/dev/null ||
          "$TORCH_VENV/bin/pip" install -q torch 2>/dev/null; } ||
        { echo "bench: PyTorch from PyPI did not install; Debian's python3-torch only" >&2; rm -rf "$TORCH_VENV"; }
fi
TORCH_PYS=()
for py in "$TORCH_VENV/bin/python" /usr/bin/python3; do
    [ -x "$py" ] && "$py" -c "import torch" 2>/dev/null && TORCH_PYS+=("$py")
done
