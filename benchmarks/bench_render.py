"""The factory's renderer against `mujoco.Renderer` alone, same model, camera, size and settings.

    .venv/bin/python benchmarks/bench_render.py [--spec scene_specs/stack.yaml] [--size 128]
        [--frames 150]
        [--rounds 3] [--depth] [--segmentation object] [--scene-file stack_scene.npz]

Both render the states of one recorded seed demo. Prints one JSON object with
frames per second for: the factory (render + encode, with the encoder inline
and on one pool thread), the factory's render only, the bare `mujoco.Renderer`
with the same flags (the reference), and the bare renderer at robosuite's
defaults (reflections and shadows on). `--scene-file` (benchmarks/scene_file.py) takes the
model and states from a saved file instead of building the robosuite env (a GPU machine
without robosuite); the spec still gives the render settings. `ratio` = factory render only / bare
reference. Methods run interleaved, `--rounds` times; each figure is the best
round (a busy machine slows some rounds), all rounds are in `per_round`. With --depth /
--segmentation the factory's figures include those
passes and their PNG encoding (the bare reference stays RGB only).

`--detail [auto|<faces>]` measures `render.detail` instead (benchmarks/render_detail.py):

    .venv/bin/python benchmarks/bench_render.py --detail auto [--sizes 84,128,224]
        [--cameras agentview,robot0_eye_in_hand] [--frames 60] [--rounds 3]
        [--images docs/images]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from demofactory.seeds.resolve import resolve_spec  # noqa: E402
from demofactory.simulation.render import FrameRenderer  # noqa: E402
from demofactory.specs.spec import CameraSpec, load_spec  # noqa: E402


def _fps(fn, states) -> float:
    start = time.perf_counter()
    for state in states:
        fn(state)
    return len(states) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default="scene_specs/stack.yaml")
    parser.add_argument("--camera", default="agentview")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--depth", action="store_true")
    parser.add_argument(
        "--segmentation", default="none", choices=["none", "geom", "body", "object"]
    )
    parser.add_argument(
        "--scene-file", default=None, help="a saved scene (benchmarks/scene_file.py)"
    )
    parser.add_argument(
        "--detail",
        nargs="?",
        const="auto",
        default=None,
        help="compare render.detail (auto, or faces per mesh) against full meshes",
    )
    parser.add_argument("--sizes", default="84,128,224", help="--detail: image sizes")
    parser.add_argument(
        "--cameras", default="agentview,robot0_eye_in_hand", help="--detail: cameras"
    )
    parser.add_argument("--images", default="docs/images", help="--detail: where PNGs go")
    args = parser.parse_args()
    if args.detail is not None:
        from render_detail import detail_main

        detail_main(args)
        return
    import mujoco  # after factory: importing it picks the offscreen GL backend

    spec = load_spec(args.spec)
    if args.scene_file:
        from scene_file import load_scene_file

        scene, states = load_scene_file(Path(args.scene_file))
    else:
        resolved = resolve_spec(spec)
        scene, states = resolved.scene, resolved.demos[0].demo.states
    states = states[: args.frames]
    cam = CameraSpec(
        name=args.camera,
        width=args.size,
        height=args.size,
        depth=args.depth,
        segmentation=args.segmentation,
    )
    factory = FrameRenderer(scene, [cam], spec.render)
    threaded = FrameRenderer(scene, [cam], spec.render, encode_threads=1)
    bare = mujoco.Renderer(scene.model, height=args.size, width=args.size)
    # the same geoms as the factory draws: visual (group 1), not collision
    visual_only = mujoco.MjvOption()
    visual_only.geomgroup[0], visual_only.geomgroup[1] = 0, 1

    def bare_render(state, reflections=spec.render.reflections, shadows=spec.render.shadows):
        scene.set_state(state)
        bare.update_scene(scene.data, camera=args.camera, scene_option=visual_only)
        bare.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = reflections
        bare.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = shadows
        bare.render()

    def factory_render(state):
        scene.set_state(state)
        factory.render_views()

    factory_render(states[0])  # warm up the GL contexts
    threaded.render_frames(states[:1])
    bare_render(states[0])
    methods = {
        "factory_render_fps": lambda: _fps(factory_render, states),
        "factory_render_encode_inline_fps": lambda: (
            len(states) / _time(lambda: factory.render_frames(states))
        ),
        "factory_render_encode_thread_fps": lambda: (
            len(states) / _time(lambda: threaded.render_frames(states))
        ),
        "bare_renderer_fps": lambda: _fps(bare_render, states),
        "bare_robosuite_defaults_fps": lambda: _fps(lambda s: bare_render(s, True, True), states),
    }
    rounds: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.rounds):  # interleaved, best of: a busy machine slows some rounds
        for name, measure in methods.items():
            rounds[name].append(round(measure(), 1))
    result = {
        "benchmark": "render",
        "spec": args.spec,
        "scene_file": args.scene_file,
        "camera": args.camera,
        "size": args.size,
        "depth": args.depth,
        "segmentation": args.segmentation,
        "frames": len(states),
        "rounds": args.rounds,
        "mujoco_gl": os.environ.get("MUJOCO_GL"),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        **{name: max(values) for name, values in rounds.items()},
        "per_round": rounds,
    }
    result["ratio"] = round(result["factory_render_fps"] / result["bare_renderer_fps"], 3)
    result["encode_thread_speedup"] = round(
        result["factory_render_encode_thread_fps"] / result["factory_render_encode_inline_fps"], 3
    )
    print(json.dumps(result))
    factory.close()
    threaded.close()
    bare.close()


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
