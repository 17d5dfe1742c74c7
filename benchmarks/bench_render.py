"""The factory's renderer against `mujoco.Renderer` alone, same model, camera, size and settings.

    .venv/bin/python benchmarks/bench_render.py [--spec scene_specs/stack.yaml] [--size 128] [--frames 150]

Both render the states of one recorded seed demo. Prints one JSON object with
frames per second for: the factory (render + JPEG encode), the factory's render
only, the bare `mujoco.Renderer` with the same flags (the reference), and the
bare renderer at robosuite's defaults (reflections and shadows on).
`ratio` = factory render only / bare reference.
"""

from __future__ import annotations

import argparse
import json
import time

from factory.render import FrameRenderer
from factory.resolve import resolve_spec
from factory.spec import CameraSpec, load_spec


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
    args = parser.parse_args()
    import mujoco  # after factory: importing it picks the offscreen GL backend

    spec = load_spec(args.spec)
    resolved = resolve_spec(spec)
    scene = resolved.scene
    states = resolved.demos[0].demo.states[: args.frames]
    cam = CameraSpec(name=args.camera, width=args.size, height=args.size)
    factory = FrameRenderer(scene, [cam], spec.render)
    bare = mujoco.Renderer(scene.model, height=args.size, width=args.size)

    def bare_render(state, reflections=spec.render.reflections, shadows=spec.render.shadows):
        scene.set_state(state)
        bare.update_scene(scene.data, camera=args.camera)
        bare.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = reflections
        bare.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = shadows
        bare.render()

    def factory_render(state):
        scene.set_state(state)
        factory.render_current()

    factory_render(states[0])  # warm up both GL contexts
    bare_render(states[0])
    result = {
        "benchmark": "render",
        "spec": args.spec,
        "camera": args.camera,
        "size": args.size,
        "frames": len(states),
        "mujoco_gl": __import__("os").environ.get("MUJOCO_GL"),
        "factory_render_fps": round(_fps(factory_render, states), 1),
        "factory_render_jpeg_fps": round(len(states) / _time(lambda: factory.render_states(states)), 1),
        "bare_renderer_fps": round(_fps(bare_render, states), 1),
        "bare_robosuite_defaults_fps": round(_fps(lambda s: bare_render(s, True, True), states), 1),
    }
    result["ratio"] = round(result["factory_render_fps"] / result["bare_renderer_fps"], 3)
    print(json.dumps(result))
    factory.close()
    bare.close()


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
