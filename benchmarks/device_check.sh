#!/usr/bin/env bash
# The GPU checks, as one script for a lent GPU machine (no robosuite, no Ray, no package index).
#
# Prepared here (paths ignored by git, carried to the machine):
#   .devdata/stack_scene.npz  benchmarks/scene_file.py --spec scene_specs/stack.yaml --out .devdata/stack_scene.npz
#   .whl/                     cp312 wheels of mujoco, diffusers, pydantic (+ their missing needs)
#   .gl/                      the GL loader .debs (libegl1, libglvnd0, libopengl0, ...)
#   batched only:
#   .devdata/stack_trace.npz  benchmarks/bench_batched.py --spec scene_specs/stack.yaml --save-trace .devdata/stack_trace.npz
#   .whl/ + the gpu extra     pip download --only-binary :all: --python-version 3.12 -d .whl mujoco-warp==3.9.0.1 warp-lang==1.13.0
#                             (and absl-py, etils, fsspec, importlib_resources, zipp, typing_extensions)
# Results land in $OUT (one JSON per benchmark, and the log).
#
#   bash benchmarks/device_check.sh [all|farm|batched]
#     farm: only the render farm sweeps; batched: only MuJoCo Warp (bench_batched.py), under 10 min, one call
set -u
OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MUJOCO_GL=egl PYOPENGL_PLATFORM=egl
vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
[ -f "$vendor" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$vendor
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
nproc
python3 -c "import mujoco, diffusers, torch, pydantic; print('mujoco', mujoco.__version__, 'diffusers', diffusers.__version__, 'torch', torch.__version__)"

scene=.devdata/stack_scene.npz
step() {  # name, timeout, command...
    local name=$1 limit=$2; shift 2
    echo "== $name"
    local t0=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.json" || echo "!! $name failed (exit $?)"
    cat "$OUT/$name.json"; echo "   ($((SECONDS - t0)) s)"
}
if [ "${1:-all}" = batched ]; then  # no GL, diffusers or torch needed
    python3 -c "import mujoco, mujoco_warp, warp; print('mujoco', mujoco.__version__, 'warp', warp.__version__)" || exit 1
    trace=.devdata/stack_trace.npz
    batched="python3 benchmarks/bench_batched.py --trace $trace --device cuda:0 --cpu-steps 40"
    # first: the kernels compile (a few minutes once, cached under ~/.cache/warp for the rest)
    step batched_64 200 $batched --worlds 64 --steps 10
    step batched_sweep 200 $batched --worlds 64,256,1024,4096,8192 --steps 20 --plot "$OUT/batched_sweep.png"
    # the batched OSC loop too (needs the project's wheel in .whl, as the render benchmarks do)
    step batched_osc 120 $batched --worlds 1024,8192 --steps 10 --osc
    # the contact and distance predicates' reads on the device vs CPU MuJoCo, and one ask's time
    step batched_contacts 80 $batched --worlds 64,1024 --contacts 200
    exit 0
fi
farm="python3 benchmarks/bench_render_farm.py --scene-file $scene --cameras 2"
if [ "${1:-all}" = farm ]; then
    step farm_84_sweep 150 $farm --size 84 --processes 1,2,4,8,16 --repeat 8
    step farm_84_render_only 150 $farm --size 84 --processes 1,2,4,8,16 --repeat 8 --render-only
    step farm_128_sweep 150 $farm --size 128 --processes 1,2,4,8 --repeat 6
    exit 0
fi
step farm_84 150 $farm --size 84 --processes 1,4,8,16 --repeat 3
step render_84 60 python3 benchmarks/bench_render.py --scene-file $scene --size 84 --rounds 2
step render_256 60 python3 benchmarks/bench_render.py --scene-file $scene --size 256 --rounds 2
step texture_sd15 300 python3 benchmarks/bench_texture_bank.py --arch sd15 --size 512 --steps 25 --device cuda --images 8
