"""`factory validate SPEC --still DIR`: one PNG per camera of a spec's scene, before any run.

    spec ──► Scene (the generation model) ──► reset to the nominal layout, objects settled,
             palette objects painted as the first attempt draws them
         ──► per camera (the spec's `cameras:`, then scene cameras it does not list, 256x256)
         ──► DIR/<camera>.png, upright, with the spec's render settings

So a user can check a layout, a camera pose and the colours before generating anything.
"""

from __future__ import annotations

from pathlib import Path

from demofactory.generators.mimicgen import attempt_seed
from demofactory.simulation.render import FrameRenderer
from demofactory.simulation.scene import Placement, Scene
from demofactory.specs.language import episode_language, paint_objects
from demofactory.specs.spec import CameraSpec
from PIL import Image

STILL_SIZE = 256  # pixels, for scene cameras the spec's `cameras:` does not list


def still_cameras(scene: Scene) -> list[CameraSpec]:
    """The cameras to picture: the spec's, plus the scene section's unlisted ones."""
    cameras = list(scene.spec.cameras)
    listed = {cam.name for cam in cameras}
    if scene.spec.scene is not None:
        cameras += [
            CameraSpec(name=cam.name, width=STILL_SIZE, height=STILL_SIZE)
            for cam in scene.spec.scene.cameras
            if cam.name not in listed
        ]
    return cameras


def write_stills(scene: Scene, out_dir: Path) -> list[Path]:
    """Render the scene's start layout once per camera into `out_dir`; the PNG paths written."""
    cameras = still_cameras(scene)
    if not cameras:
        cameras = [CameraSpec(name=scene.camera_names()[0], width=STILL_SIZE, height=STILL_SIZE)]
    scene.reset_to(None, Placement({}))
    # the colours of the first attempt's draw, as its episode shows them (palette objects)
    language = episode_language(scene.spec, attempt_seed(scene.spec.seed, 0, 0))
    undo = paint_objects(scene, language.rgba)
    renderer = FrameRenderer(scene, cameras, scene.spec.render)
    try:
        images = renderer.render_current()
    finally:
        renderer.close()
        undo()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, image in images.items():
        path = out_dir / f"{name}.png"
        tmp = path.with_name(f".{path.name}.tmp")
        Image.fromarray(image).save(tmp, format="PNG")
        tmp.replace(path)
        written.append(path)
    return written
