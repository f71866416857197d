#!/usr/bin/env bash
# Idempotent setup: .venv with the pinned model stack, a cached llama-cpp-python wheel, the package.
# Environment knobs:
#   PYTHON=python3.11        interpreter for the venv
#   TORCH_SPEC="torch==X"    what to install for torch when the venv has none (default: CPU pin, or
#                            the default CUDA build when nvidia-smi sees a GPU)
#   LLAMA_CMAKE_ARGS="..."   CMake args for llama-cpp-python, replacing the detected CPU flags
#                            (e.g. "-DGGML_CUDA=on" on a CUDA machine)
#   TOOLDECODE_HOME=DIR      cache for built wheels and model weights (default ~/.cache/tooldecode)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
CACHE=${TOOLDECODE_HOME:-$HOME/.cache/tooldecode}
LLAMA_VERSION=0.3.36
TORCH_CPU_PIN=torch==2.13.0

stamp_src=$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -c1-16)
STAMP=$VENV/.tooldecode-setup-$stamp_src
if [ -f "$STAMP" ]; then
  exit 0
fi

log() { printf 'setup: %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "tooldecode needs Python >= 3.11"' \
    || { log "error: $PYTHON is older than 3.11; set PYTHON=python3.11 and rerun"; exit 1; }
  log "creating $VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
PIP=("$VENV/bin/python" -m pip install -q -c constraints.txt)

# 1. torch: leave an existing (e.g. CUDA) torch alone; otherwise CPU pin on CPU-only machines.
if "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  log "torch present: $("$VENV/bin/python" -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "cpu")')"
else
  if [ -n "${TORCH_SPEC:-}" ]; then spec=$TORCH_SPEC
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then spec=torch
  else spec=$TORCH_CPU_PIN; fi
  log "installing $spec"
  "$VENV/bin/python" -m pip install -q "$spec"
fi

# 2. llama-cpp-python: compiled once per CPU (the default build is -march=native), wheel cached.
if ! "$VENV/bin/python" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$LLAMA_VERSION')" 2>/dev/null; then
  # The default build is -march=native, which on some virtual machines enables AMX kernels that
  # crash (the CPU advertises AMX but the tile state is not usable). On x86-64 we therefore pick the
  # instruction sets from /proc/cpuinfo explicitly, AMX off; the wheel is cached per instruction set.
  read -r key cmake_args < <("$VENV/bin/python" - <<'PY'
import hashlib, os, platform, sys
args = os.environ.get("LLAMA_CMAKE_ARGS")
if args is None:
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    if platform.machine() in ("x86_64", "AMD64") and flags:
        opts = ["GGML_NATIVE=OFF", "GGML_AMX_TILE=OFF", "GGML_AMX_INT8=OFF", "GGML_AMX_BF16=OFF"]
        table = [("avx", "GGML_AVX"), ("avx2", "GGML_AVX2"), ("fma", "GGML_FMA"), ("f16c", "GGML_F16C"),
                 ("bmi2", "GGML_BMI2"), ("avx512f", "GGML_AVX512"), ("avx512_vbmi", "GGML_AVX512_VBMI"),
                 ("avx512_vnni", "GGML_AVX512_VNNI"), ("avx512_bf16", "GGML_AVX512_BF16"),
                 ("avx_vnni", "GGML_AVX_VNNI")]
        opts += [f"{opt}={'ON' if flag in flags else 'OFF'}" for flag, opt in table]
        args = " ".join("-D" + o for o in opts)
    else:
        args = ""
digest = hashlib.sha256(args.encode()).hexdigest()[:12]
print(f"{platform.machine()}-py{sys.version_info[0]}{sys.version_info[1]}-{digest}", args)
PY
)
  wheeldir=$CACHE/wheels/llama-cpp-python-$LLAMA_VERSION/$key
  mkdir -p "$wheeldir"
  if ! ls "$wheeldir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    log "building llama-cpp-python $LLAMA_VERSION for this CPU (about 5 minutes on 2 cores; cached in $wheeldir)"
    tmp=$(mktemp -d "$wheeldir/.build-XXXXXX")
    CMAKE_ARGS="$cmake_args" "$VENV/bin/python" -m pip wheel -q --no-deps --no-cache-dir \
      "llama-cpp-python==$LLAMA_VERSION" -w "$tmp"
    mv "$tmp"/llama_cpp_python-*.whl "$wheeldir"/
    rm -rf "$tmp"
  fi
  log "installing cached llama-cpp-python wheel from $wheeldir"
  "${PIP[@]}" "$wheeldir"/llama_cpp_python-*.whl
fi

# 3. The package and the rest of the stack, pinned.
log "installing tooldecode and its dependencies"
"${PIP[@]}" -e '.[models,report,dev,server]'
"$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 >/dev/null 2>&1 || true

rm -f "$VENV"/.tooldecode-setup-*
touch "$STAMP"
log "done"
