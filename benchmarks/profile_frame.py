"""Where a frame's CPU time goes: the pieces of one `mujoco.Renderer` frame, and what changes it.

    LP_NUM_THREADS=0 .venv/bin/python benchmarks/profile_frame.py [--spec scene_specs/stack.yaml]
        [--cameras agentview,robot0_eye_in_hand] [--sizes 84,224] [--frames 40] [--rounds 3]
        [--glibc-default-heap] [--scene-file stack_scene.npz]

On the states of the spec's first seed demo, per camera and size, CPU milliseconds per frame
(this process, all threads; LP_NUM_THREADS=0 keeps llvmpipe's rasteriser on the calling thread),
best of `--rounds`, for the frame's pieces (`mjv_updateScene`, `mjr_render` followed by
`glFinish` so the rasterisation is billed to it, `mjr_readPixels`, the flip) and for the same
frame changed one way at a time: no geom drawn, no mesh geom drawn, shadows off, skybox off,
view culling (factory/simulation/view_cull.py), `render.detail: auto` with and without culling.
Minor page faults per frame too (`--glibc-default-heap`: without `keep_freed_heap`, as before
it; whether a renderer then faults depends on the heap's layout). The spec's render settings
(reflections, shadows, multisamples) apply; geoms of groups 1 and 2 are drawn, as the factory
does. Prints one JSON object; docs/render_detail.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from demofactory.seeds.resolve import resolve_spec
from demofactory.simulation.render import detail_model, keep_freed_heap
from demofactory.simulation.view_cull import cull_outside_view, geom_boxes, geom_radii
from demofactory.specs.spec import CameraSpec, load_spec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default="scene_specs/stack.yaml")
    parser.add_argument("--cameras", default="agentview,robot0_eye_in_hand")
    parser.add_argument("--sizes", default="84,224")
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--scene-file",
        default=None,
        help="a saved scene (benchmarks/scene_file.py) instead of building the env: no auto rows",
    )
    parser.add_argument(
        "--glibc-default-heap",
        action="store_true",
        help="leave malloc's trim and mmap thresholds at glibc's defaults (no keep_freed_heap)",
    )
    args = parser.parse_args()
    import mujoco  # after demofactory: it picks the GL backend
    from OpenGL import GL

    if not args.glibc_default_heap:
        keep_freed_heap()  # as every FrameRenderer does
    spec = load_spec(args.spec)
    if args.scene_file:
        from scene_file import load_scene_file

        scene, states = load_scene_file(Path(args.scene_file))
    else:
        resolved = resolve_spec(spec)
        scene, states = resolved.scene, resolved.demos[0].demo.states
    picks = np.linspace(0, len(states) - 1, min(args.frames, len(states))).round().astype(int)
    states = states[picks]
    model, settings = scene.model, spec.render
    model.vis.quality.offsamples = settings.multisamples
    option = mujoco.MjvOption()
    option.geomgroup[0], option.geomgroup[1] = 0, 1
    none = mujoco.mjtGeom.mjGEOM_NONE

    def hide(scn, which) -> None:
        for i in range(scn.ngeom):
            if which(scn.geoms[i]):
                scn.geoms[i].type = none

    def measure(renderer, camera, *, shadows=settings.shadows, skybox=True, edit=None) -> dict:
        pieces = dict.fromkeys(("update", "render", "read", "flip"), 0.0)
        out = np.empty((renderer.height, renderer.width, 3), np.uint8)

        def one() -> None:
            c0 = time.process_time()
            renderer.update_scene(scene.data, camera=camera, scene_option=option)
            flags = renderer.scene.flags
            flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = settings.reflections
            flags[mujoco.mjtRndFlag.mjRND_SHADOW] = shadows
            flags[mujoco.mjtRndFlag.mjRND_SKYBOX] = skybox
            if edit is not None:
                edit(renderer.scene)
            c1 = time.process_time()
            renderer._gl_context.make_current()
            mujoco.mjr_render(renderer._rect, renderer.scene, renderer._mjr_context)
            GL.glFinish()
            c2 = time.process_time()
            mujoco.mjr_readPixels(out, None, renderer._rect, renderer._mjr_context)
            c3 = time.process_time()
            out[:] = np.flipud(out)
            c4 = time.process_time()
            for key, a, b in (("update", c0, c1), ("render", c1, c2), ("read", c2, c3)):
                pieces[key] += b - a
            pieces["flip"] += c4 - c3

        scene.set_state(states[0])
        one()  # warm
        best, best_pieces, faults = float("inf"), {}, 0.0
        for _ in range(args.rounds):
            pieces.update(dict.fromkeys(pieces, 0.0))
            f0, c0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
            for state in states:
                scene.set_state(state)
                one()
            total = time.process_time() - c0
            if total < best:
                best, best_pieces = total, dict(pieces)
                faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / len(states)
        n = len(states)
        return {
            "cpu_ms": round(1000 * best / n, 2),
            "pieces_ms": {k: round(1000 * v / n, 3) for k, v in best_pieces.items()},
            "minor_faults": round(faults, 1),
        }

    results = []
    for camera in args.cameras.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            full = mujoco.Renderer(model, height=size, width=size)
            radii, boxes = geom_radii(model, None), geom_boxes(model, None)

            def cull(scn, radii=radii, boxes=boxes):
                cull_outside_view(scn, radii, 1.0, boxes)  # square images: aspect 1

            row = {"camera": camera, "size": size}
            row["full"] = measure(full, camera)
            row["no_geoms"] = measure(full, camera, edit=lambda s: hide(s, lambda g: True))
            row["no_mesh_geoms"] = measure(
                full,
                camera,
                edit=lambda s: hide(s, lambda g: g.type == mujoco.mjtGeom.mjGEOM_MESH),
            )
            row["shadows_off"] = measure(full, camera, shadows=False)
            row["skybox_off"] = measure(full, camera, skybox=False)
            row["full_culled"] = measure(full, camera, edit=cull)
            full.close()
            cam = CameraSpec(name=camera, width=size, height=size)
            render, report = detail_model(scene, [cam], "auto")
            if render is not None:
                render.vis.global_.offwidth = model.vis.global_.offwidth
                render.vis.global_.offheight = model.vis.global_.offheight
                render.vis.quality.offsamples = model.vis.quality.offsamples
                auto = mujoco.Renderer(render, height=size, width=size)
                auto._model = model  # scenes from the physics model, as FrameRenderer does
                row["auto_unculled"] = measure(auto, camera)
                auto_radii, auto_boxes = geom_radii(model, render), geom_boxes(model, render)
                row["auto"] = measure(
                    auto,
                    camera,
                    edit=lambda s, r=auto_radii, b=auto_boxes: cull_outside_view(s, r, 1.0, b),
                )
                auto.close()
            row["auto_faces"] = report.faces_drawn
            results.append(row)
    print(
        json.dumps(
            {
                "benchmark": "profile_frame",
                "spec": args.spec,
                "frames": len(states),
                "rounds": args.rounds,
                "mujoco_gl": os.environ.get("MUJOCO_GL"),
                "lp_num_threads": os.environ.get("LP_NUM_THREADS"),
                "glibc_default_heap": args.glibc_default_heap,
                "load_average_1min": round(os.getloadavg()[0], 2),
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    from demofactory.robots import repairs as robot_repairs

    robot_repairs.install()  # before any env is built, as the CLI does
    main()
