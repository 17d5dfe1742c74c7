"""Rendering throughput of N processes sharing one machine (and its GPU, if EGL finds one).

    .venv/bin/python benchmarks/bench_render_farm.py
        [--spec scene_specs/stack.yaml | --scene-file F.npz]
        [--processes 1,2] [--size 84] [--cameras 2] [--frames 150] [--repeat 2]

Each process is what a Ray render actor does per episode: `FrameRenderer.render_frames` on
recorded states, `--cameras` views of `--size` px each, rendered and JPEG-encoded
(`--render-only`: rendered and read back, not encoded). All
processes start together (a barrier) and the figure is total frames over the slowest
process's wall time. `scaling` = frames/s with N processes / frames/s with one (the
reference, measured in the same run). With `--scene-file` (see benchmarks/scene_file.py) no
robosuite is needed, which is how it runs on a GPU machine:

    MUJOCO_GL=egl python benchmarks/bench_render_farm.py --scene-file stack_scene.npz \
        --processes 1,4,8,16

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import demofactory  # noqa: E402, F401  (before mujoco: it picks the offscreen GL backend)


def _load(args):
    if args.scene_file:
        from scene_file import load_scene_file

        return load_scene_file(Path(args.scene_file))
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    resolved = resolve_spec(load_spec(args.spec))
    return resolved.scene, resolved.demos[0].demo.states


def _worker(args, barrier, results) -> None:
    from demofactory.robots import repairs as robot_repairs
    from demofactory.simulation.render import FrameRenderer
    from demofactory.specs.spec import CameraSpec, RenderSpec

    robot_repairs.install()  # a spawned process: robosuite's registries start afresh
    scene, states = _load(args)
    states = states[: args.frames]
    names = ["agentview", "robot0_eye_in_hand", "frontview", "birdview", "sideview"][: args.cameras]
    cams = [CameraSpec(name=n, width=args.size, height=args.size) for n in names]
    renderer = FrameRenderer(scene, cams, RenderSpec())
    renderer.render_frames(states[:2])  # GL contexts made, textures uploaded
    barrier.wait()
    start = time.perf_counter()
    frames = 0
    for _ in range(args.repeat):
        if args.render_only:  # the GL work and the readback, no JPEG encoding
            for state in states:
                scene.set_state(state)
                renderer.render_views()
        else:
            renderer.render_frames(states)
        frames += len(states) * len(cams)
    results.put((frames, time.perf_counter() - start))
    renderer.close()


def _run(args, n: int) -> dict:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(args, barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    done = [results.get(timeout=900) for _ in procs]
    for p in procs:
        p.join()
    frames = sum(f for f, _ in done)
    wall = max(s for _, s in done)
    return {
        "processes": n,
        "frames": frames,
        "wall_s": round(wall, 2),
        "fps": round(frames / wall, 1),
    }


def _gl_vendor(args) -> dict:
    """Which GL implementation the renderer got (llvmpipe is Mesa on the CPU)."""
    import mujoco  # after factory (imported at the top): it picks the GL backend

    scene, _ = _load(args)
    r = mujoco.Renderer(scene.model, 32, 32)
    try:
        from OpenGL import GL

        r._gl_context.make_current()
        return {
            "gl_vendor": GL.glGetString(GL.GL_VENDOR).decode(),
            "gl_renderer": GL.glGetString(GL.GL_RENDERER).decode(),
        }
    except Exception as exc:  # noqa: BLE001 - informational only
        return {"gl_vendor": f"unknown ({type(exc).__name__})"}
    finally:
        r.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="scene_specs/stack.yaml")
    parser.add_argument("--scene-file", default=None)
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--size", type=int, default=84)
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--render-only", action="store_true", help="leave out the JPEG encoding (on the CPU)"
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",")]
    runs = [_run(args, n) for n in counts]
    base = runs[0]["fps"] / runs[0]["processes"]
    for run in runs:
        run["scaling"] = round(run["fps"] / base, 2)
    print(
        json.dumps(
            {
                "benchmark": "render_farm",
                "scene": args.scene_file or args.spec,
                "size": args.size,
                "cameras": args.cameras,
                "render_only": args.render_only,
                "mujoco_gl": os.environ.get("MUJOCO_GL", "egl"),
                **_gl_vendor(args),
                "cpus": os.cpu_count(),
                "cpu": platform.processor() or platform.machine(),
                "load_average_1min": round(os.getloadavg()[0], 2),
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
