#!/usr/bin/env bash
# Build (and optionally install) llama-cpp-python with a GPU backend, for a GPU build of Speculens.
#
#   packaging/build_gpu_wheel.sh cuda            # NVIDIA, Linux or Windows (Git Bash); needs the CUDA toolkit
#   packaging/build_gpu_wheel.sh metal           # Apple Silicon (the default there anyway)
#   packaging/build_gpu_wheel.sh vulkan          # any Vulkan GPU; needs the Vulkan SDK
#   packaging/build_gpu_wheel.sh cpu             # portable CPU build for release bundles
#
# Options (environment):
#   LLAMA_CPP_VERSION   version to build (default: the one installed, else the newest on PyPI)
#   WHEEL_DIR           where the wheel goes (default: dist/wheels)
#   INSTALL=1           also install it into the current Python environment (replacing the current one)
#   CUDA_ARCHITECTURES  e.g. "75;86;89" (default: llama.cpp's list; naming fewer builds much faster)
#   EXTRA_CMAKE_ARGS    appended to CMAKE_ARGS
#
# Then build the bundle as usual (python packaging/build.py --self-test). The About box and the log say
# which backend the bundled llama.cpp has ("llama.cpp with CUDA offload ..."). See packaging/GPU.md.
set -euo pipefail

backend=${1:-}
PYTHON=${PYTHON:-python}
WHEEL_DIR=${WHEEL_DIR:-dist/wheels}

# GGML_NATIVE=OFF everywhere: a release must run on other people's CPUs, not only the build machine's
# (-march=native would make the bundle die with "illegal instruction" on older processors).
case "$backend" in
    cuda)
        CMAKE_ARGS="-DGGML_CUDA=on -DGGML_NATIVE=OFF"
        if [ -n "${CUDA_ARCHITECTURES:-}" ]; then
            CMAKE_ARGS="$CMAKE_ARGS -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES"
        fi
        command -v nvcc >/dev/null || { echo "nvcc not found: install the CUDA toolkit and put its bin/ on PATH" >&2; exit 1; }
        ;;
    metal)
        [ "$(uname -s)" = Darwin ] || { echo "Metal builds need macOS" >&2; exit 1; }
        CMAKE_ARGS="-DGGML_METAL=on -DGGML_NATIVE=OFF"
        ;;
    vulkan)
        CMAKE_ARGS="-DGGML_VULKAN=on -DGGML_NATIVE=OFF"
        ;;
    cpu)
        CMAKE_ARGS="-DGGML_NATIVE=OFF"
        if [ "$(uname -s)" = Darwin ]; then
            CMAKE_ARGS="$CMAKE_ARGS -DGGML_METAL=off"
        fi
        ;;
    *)
        sed -n '2,17p' "$0" >&2
        exit 2
        ;;
esac
CMAKE_ARGS="$CMAKE_ARGS ${EXTRA_CMAKE_ARGS:-}"

version=${LLAMA_CPP_VERSION:-$("$PYTHON" -c 'from importlib.metadata import version; print(version("llama-cpp-python"))' 2>/dev/null || true)}
spec="llama-cpp-python${version:+==$version}"

echo "building $spec with CMAKE_ARGS=\"$CMAKE_ARGS\""
mkdir -p "$WHEEL_DIR"
# --no-binary: never take a cached or prebuilt CPU wheel; --no-deps: only llama-cpp-python itself.
CMAKE_ARGS="$CMAKE_ARGS" "$PYTHON" -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python \
    -w "$WHEEL_DIR" "$spec"

wheel=$(ls -t "$WHEEL_DIR"/llama_cpp_python-*.whl | head -n 1)
echo "built $wheel"
if [ "${INSTALL:-0}" = 1 ]; then
    "$PYTHON" -m pip install --force-reinstall --no-deps "$wheel"
    "$PYTHON" -c 'from speculens.logging_setup import backend_description; print(backend_description())'
fi
