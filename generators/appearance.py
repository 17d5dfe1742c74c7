"""Appearance variants: per-episode looks drawn from parameters, applied to the model, then undone.

    AppearanceParams + rng ──► draw_appearance ──► AppearanceDraw (plain data;
                                                   provenance["appearance"])
    AppearanceRandomizer(params, model, bank, upload), once per worker: binds surfaces, records
                                                   originals
        .apply(draw)  textures written into their model.tex_data slots (then re-uploaded to GL),
                      colours, lights, camera poses
        .restore()    every touched model array back to its original bytes (and GL re-uploaded,
                      at once or deferred to the next apply()/sync(): see restore)

Only visual model fields change (tex_data, mat_rgba, geom_rgba, light_*, cam_*): none of them
enters the dynamics, and restore() puts them back before the next physics step anyway.

Surfaces and how they are found in a robosuite model:
    floor    the geom named "floor"                     (material floorplane)
    walls    geoms whose name starts with "wall"        (material walls_mat)
    table    geoms of bodies table / bin1 / bin2, legs excepted
             (table_ceramic; PickPlace's bins: wood)
    <object> every geom of the object's body and the bodies below it
A geom whose material has a texture gets the drawn image written into that texture. A geom whose
material has no texture gets the draw's first colour as its material colour (mat_rgba, alpha kept),
and a geom without material gets it as its geom colour (geom_rgba, alpha kept). Two surfaces sharing
one texture or material: the one listed later in `appearance.textures.surfaces` wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import mujoco
import numpy as np
from demofactory.generators.errors import GeneratorFieldError
from demofactory.generators.params import AppearanceParams
from demofactory.generators.textures import fit_texture, make_pattern

PATTERN_SIZE = (
    256  # pixels: procedural images are made at this side, then fitted to each texture slot
)
DECIMALS = 6  # drawn values are rounded so that the JSON record is exactly what was applied
TABLE_BODIES = ("table", "bin1", "bin2")

Vec3 = tuple[float, float, float]


@dataclass(frozen=True)
class SurfaceDraw:
    """The look of one surface: a procedural pattern or a texture-bank image, and two colours."""

    pattern: str | None  # procedural pattern name; None when a bank image is used
    bank_image: int | None  # index into the texture bank; None for a procedural pattern
    # RGB in [0, 1]; colors[0] also colours untextured geoms and materials
    colors: tuple[Vec3, Vec3]
    seed: int  # seeds the pattern's own parameters (scale, angle, noise)

    def to_json(self) -> dict:
        return {
            "pattern": self.pattern,
            "bank_image": self.bank_image,
            "colors": [list(c) for c in self.colors],
            "seed": self.seed,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> SurfaceDraw:
        colors = tuple(tuple(float(v) for v in c) for c in data["colors"])
        return cls(data["pattern"], data["bank_image"], colors, int(data["seed"]))


@dataclass(frozen=True)
class LightDraw:
    """A change to one light: shift (metres, light's body frame), tilt, diffuse scale and tint."""

    position: Vec3  # added to light_pos
    direction: Vec3  # rotation vector (axis * angle, radians) applied to light_dir
    intensity: float  # light_diffuse multiplied by this ...
    color: Vec3  # ... and by this per channel

    def to_json(self) -> dict:
        return {
            "position": list(self.position),
            "direction": list(self.direction),
            "intensity": self.intensity,
            "color": list(self.color),
        }

    @classmethod
    def from_json(cls, data: Mapping) -> LightDraw:
        return cls(
            _vec(data["position"]),
            _vec(data["direction"]),
            float(data["intensity"]),
            _vec(data["color"]),
        )


@dataclass(frozen=True)
class CameraDraw:
    """A camera pose jitter, in the frame of the camera's parent body (eye-in-hand: the hand)."""

    position: Vec3  # metres added to cam_pos
    rotation: Vec3  # rotation vector (radians) about the camera's own axes, composed with cam_quat

    def to_json(self) -> dict:
        return {"position": list(self.position), "rotation": list(self.rotation)}

    @classmethod
    def from_json(cls, data: Mapping) -> CameraDraw:
        return cls(_vec(data["position"]), _vec(data["rotation"]))


@dataclass(frozen=True)
class AppearanceDraw:
    """One variant's look; empty fields leave the model as it is (default: the original scene)."""

    surfaces: Mapping[str, SurfaceDraw] = field(default_factory=dict)  # surface name -> look
    # light i of the model gets lights[i]; lights past the end untouched
    lights: tuple[LightDraw, ...] = ()
    cameras: Mapping[str, CameraDraw] = field(default_factory=dict)  # camera name -> jitter

    @property
    def is_original(self) -> bool:
        return not (self.surfaces or self.lights or self.cameras)

    def to_json(self) -> dict:
        return {
            "surfaces": {k: v.to_json() for k, v in self.surfaces.items()},
            "lights": [light.to_json() for light in self.lights],
            "cameras": {k: v.to_json() for k, v in self.cameras.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping) -> AppearanceDraw:
        return cls(
            surfaces={k: SurfaceDraw.from_json(v) for k, v in data.get("surfaces", {}).items()},
            lights=tuple(LightDraw.from_json(v) for v in data.get("lights", [])),
            cameras={k: CameraDraw.from_json(v) for k, v in data.get("cameras", {}).items()},
        )


def variant_rng(spec_seed: int, attempt_seed: int, variant: int) -> np.random.Generator:
    """The generator for variant `variant` of the trajectory made from `attempt_seed`."""
    return np.random.default_rng(np.random.SeedSequence([spec_seed, attempt_seed, variant]))


def draw_appearance(
    params: AppearanceParams, rng: np.random.Generator, *, lights: int = 1, bank_size: int = 0
) -> AppearanceDraw:
    """Draw one variant from `params` (sections left out draw nothing).

    lights: how many lights the model has (each gets its own draw).
    bank_size: images in the texture bank; with a bank each surface takes one with
        chance `textures.bank_share`, else a procedural pattern.
    """
    app = params
    surfaces, light_draws, cameras = {}, (), {}
    if app.textures is not None:
        share = app.textures.bank_share if bank_size > 0 else 0.0
        surfaces = {
            name: _draw_surface(rng, app.textures.patterns, share, bank_size)
            for name in app.textures.surfaces
        }
    if app.lights is not None:
        light_draws = tuple(_draw_light(rng, app.lights) for _ in range(lights))
    if app.camera is not None:
        cameras = {
            cam: CameraDraw(
                _round(rng.uniform(-1, 1, 3) * app.camera.position),
                _round(_random_rotation(rng, app.camera.orientation)),
            )
            for cam in app.cameras
        }
    return AppearanceDraw(surfaces, light_draws, cameras)


def _draw_surface(
    rng: np.random.Generator, patterns: Sequence[str], share: float, bank_size: int
) -> SurfaceDraw:
    # The same number of draws whatever the outcome, so one surface's choice never shifts the next.
    use_bank = rng.random() < share
    image = int(rng.integers(max(bank_size, 1)))
    pattern = patterns[int(rng.integers(len(patterns)))]
    colors = rng.random((2, 3))
    seed = int(rng.integers(2**31))
    return SurfaceDraw(
        pattern=None if use_bank else pattern,
        bank_image=image if use_bank else None,
        colors=(_round(colors[0]), _round(colors[1])),
        seed=seed,
    )


def _draw_light(rng: np.random.Generator, light) -> LightDraw:
    return LightDraw(
        position=_round(rng.uniform(-1, 1, 3) * light.position),
        direction=_round(_random_rotation(rng, light.direction)),
        intensity=round(float(rng.uniform(*light.intensity)), DECIMALS),
        color=_round(1.0 + rng.uniform(-1, 1, 3) * light.color),
    )


def _random_rotation(rng: np.random.Generator, max_angle: float) -> np.ndarray:
    """A rotation vector: a uniformly random axis times an angle drawn in [0, max_angle]."""
    axis = rng.normal(size=3)
    axis /= max(float(np.linalg.norm(axis)), 1e-12)
    return axis * rng.uniform(0.0, max_angle)


def _round(values) -> Vec3:
    return tuple(round(float(v), DECIMALS) for v in values)


def _vec(values) -> Vec3:
    return tuple(float(v) for v in values)


# --- binding surfaces to the model -------------------------------------------------------------


@dataclass(frozen=True)
class SurfaceBinding:
    """What re-colouring one surface touches in the model (ids)."""

    name: str
    # textures of its textured materials (RGB role): the image is written here
    textures: tuple[int, ...]
    materials: tuple[int, ...]  # its untextured materials: mat_rgba takes colors[0]
    geoms: tuple[int, ...]  # its geoms without material: geom_rgba takes colors[0]


def bind_surfaces(params: AppearanceParams, model: mujoco.MjModel) -> dict[str, SurfaceBinding]:
    """Each surface of `textures.surfaces` found in `model` (GeneratorFieldError if one is not)."""
    textures = params.textures
    if textures is None:
        return {}
    bindings = {}
    for i, name in enumerate(textures.surfaces):
        geoms = _surface_geoms(params, model, name)
        if not geoms:
            raise GeneratorFieldError(
                params.where,
                f"appearance.textures.surfaces[{i}]",
                f"no geoms for surface {name!r} in the {params.env} model",
            )
        bindings[name] = _binding(model, name, geoms)
    return bindings


def _surface_geoms(params: AppearanceParams, model: mujoco.MjModel, surface: str) -> list[int]:
    names = [
        mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) or "" for g in range(model.ngeom)
    ]
    if surface == "floor":
        return [g for g, n in enumerate(names) if n == "floor"]
    if surface == "walls":
        return [g for g, n in enumerate(names) if n.startswith("wall")]
    if surface == "table":
        bodies = {mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, b) for b in TABLE_BODIES} - {
            -1
        }
        return [g for g, n in enumerate(names) if model.geom_bodyid[g] in bodies and "leg" not in n]
    root = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, params.objects[surface])
    return [
        g
        for g in range(model.ngeom)
        if root >= 0 and _descends(model, int(model.geom_bodyid[g]), root)
    ]


def _descends(model: mujoco.MjModel, body: int, root: int) -> bool:
    while body > 0 and body != root:
        body = int(model.body_parentid[body])
    return body == root


def _binding(model: mujoco.MjModel, name: str, geoms: list[int]) -> SurfaceBinding:
    textures, materials, bare = [], [], []
    for g in geoms:
        mat = int(model.geom_matid[g])
        if mat < 0:
            bare.append(g)
            continue
        tex = int(model.mat_texid[mat, mujoco.mjtTextureRole.mjTEXROLE_RGB])
        if tex >= 0 and model.tex_type[tex] != mujoco.mjtTexture.mjTEXTURE_SKYBOX:
            textures.append(tex)
        else:
            materials.append(mat)
    unique = lambda ids: tuple(sorted(set(ids)))  # noqa: E731
    return SurfaceBinding(name, unique(textures), unique(materials), unique(bare))


# --- applying and restoring ----------------------------------------------------------------------


class AppearanceRandomizer:
    """Applies `AppearanceDraw`s to one MuJoCo model and restores it; one per worker.

    bank: texture-bank images, uint8 [S, S, 3] (empty: procedural patterns only).
    upload: called with the texture ids whose bytes changed, to re-upload them to every GL
        context that renders this model (`FrameRenderer.upload_textures`); None: nothing renders.
    """

    def __init__(
        self,
        params: AppearanceParams,
        model: mujoco.MjModel,
        bank: Sequence[np.ndarray] = (),
        upload: Callable[[Sequence[int]], None] | None = None,
    ):
        self.params, self.model, self.upload = params, model, upload
        self.bank = list(bank)
        self.surfaces = bind_surfaces(params, model)
        self.cameras = {name: _camera_id(model, name) for name in params.cameras}
        # Originals, recorded once: what restore() writes back.
        self._tex = {
            t: _tex_slot(model, t).copy() for s in self.surfaces.values() for t in s.textures
        }
        self._arrays = {name: getattr(model, name).copy() for name in _VISUAL_ARRAYS}
        self._dirty: set[int] = set()  # textures written since the last restore
        self._stale: set[int] = set()  # textures whose GL copies may differ from model.tex_data
        self._applied = False

    def draw(self, rng: np.random.Generator) -> AppearanceDraw:
        """`draw_appearance` for this model's lights and this bank."""
        return draw_appearance(self.params, rng, lights=self.model.nlight, bank_size=len(self.bank))

    def apply(self, draw: AppearanceDraw) -> None:
        """Change the model's look to `draw`, GL textures included (call restore() in between)."""
        if self._applied:
            raise RuntimeError(
                "apply() twice without restore(): variants are applied to the original model"
            )
        self._applied = True
        for name, look in draw.surfaces.items():
            self._apply_surface(self.surfaces[name], look)
        for i, light in enumerate(draw.lights[: self.model.nlight]):
            self._apply_light(i, light)
        for name, jitter in draw.cameras.items():
            self._apply_camera(self.cameras[name], jitter)
        self.sync()

    def restore(self, sync: bool = True) -> None:
        """Every array apply() may touch back to its original bytes.

        sync False leaves the GL copies of the restored textures stale until the next
        apply() or sync(): a texture the next variant rewrites is then uploaded once, not
        twice (a 1450x1450 cube texture takes ~0.3 s to upload under software GL).
        """
        for name, original in self._arrays.items():
            getattr(self.model, name)[...] = original
        for tex in self._dirty:
            _tex_slot(self.model, tex)[...] = self._tex[tex]
        self._stale |= self._dirty
        self._dirty.clear()
        self._applied = False
        if sync:
            self.sync()

    def sync(self) -> None:
        """Re-upload textures whose GL copies are stale; call before rendering (apply() does)."""
        if self._stale and self.upload is not None:
            self.upload(sorted(self._stale))
        self._stale.clear()

    def surface_image(self, look: SurfaceDraw) -> np.ndarray:
        """The uint8 [S, S, 3] image `look` puts on a textured surface."""
        if look.bank_image is not None:
            if not self.bank:
                raise ValueError(
                    f"the draw uses texture-bank image {look.bank_image}, but no bank is loaded"
                )
            return self.bank[look.bank_image % len(self.bank)]
        return make_pattern(
            look.pattern, np.random.default_rng(look.seed), PATTERN_SIZE, np.array(look.colors)
        )

    def _apply_surface(self, binding: SurfaceBinding, look: SurfaceDraw) -> None:
        m = self.model
        if binding.textures:
            image = self.surface_image(look)
            for tex in binding.textures:
                _write_texture(m, tex, image)
                self._dirty.add(tex)
                self._stale.add(tex)
        for mat in binding.materials:
            m.mat_rgba[mat, :3] = look.colors[0]
        for geom in binding.geoms:
            m.geom_rgba[geom, :3] = look.colors[0]

    def _apply_light(self, i: int, light: LightDraw) -> None:
        m = self.model
        m.light_pos[i] = self._arrays["light_pos"][i] + light.position
        direction = np.empty(3)
        mujoco.mju_rotVecQuat(direction, self._arrays["light_dir"][i], _quat(light.direction))
        m.light_dir[i] = direction
        m.light_diffuse[i] = (
            self._arrays["light_diffuse"][i] * light.intensity * np.asarray(light.color)
        )

    def _apply_camera(self, cam: int, jitter: CameraDraw) -> None:
        m = self.model
        m.cam_pos[cam] = self._arrays["cam_pos"][cam] + jitter.position
        quat = np.empty(4)
        mujoco.mju_mulQuat(quat, self._arrays["cam_quat"][cam], _quat(jitter.rotation))
        m.cam_quat[cam] = quat / np.linalg.norm(quat)


# Model arrays apply() may change besides texture bytes; all visual, none read by the dynamics.
_VISUAL_ARRAYS = (
    "mat_rgba",
    "geom_rgba",
    "light_pos",
    "light_dir",
    "light_diffuse",
    "cam_pos",
    "cam_quat",
)


def _camera_id(model: mujoco.MjModel, name: str) -> int:
    cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
    if cam < 0:
        raise ValueError(f"no camera {name!r} in the model")
    return cam


def _quat(rotation: Sequence[float]) -> np.ndarray:
    """Unit quaternion (w, x, y, z) of a rotation vector."""
    vec = np.asarray(rotation, dtype=float)
    angle = float(np.linalg.norm(vec))
    quat = np.array([1.0, 0.0, 0.0, 0.0])
    if angle > 0:
        mujoco.mju_axisAngle2Quat(quat, vec / angle, angle)
    return quat


def _tex_slot(model: mujoco.MjModel, tex: int) -> np.ndarray:
    """The flat uint8 view of texture `tex`'s bytes in model.tex_data."""
    adr = int(model.tex_adr[tex])
    size = int(model.tex_width[tex]) * int(model.tex_height[tex]) * int(model.tex_nchannel[tex])
    return model.tex_data[adr : adr + size]


def _write_texture(model: mujoco.MjModel, tex: int, image: np.ndarray) -> None:
    """`image` [S, S, 3] uint8 resized into texture `tex`'s slot (each face of a stacked cube)."""
    width, height, channels = (
        int(model.tex_width[tex]),
        int(model.tex_height[tex]),
        int(model.tex_nchannel[tex]),
    )
    if model.tex_type[tex] == mujoco.mjtTexture.mjTEXTURE_CUBE and height == 6 * width:
        pixels = np.tile(fit_texture(image, width, width), (6, 1, 1))
    else:
        pixels = fit_texture(image, height, width)
    if channels == 4:
        pixels = np.concatenate([pixels, np.full(pixels.shape[:2] + (1,), 255, np.uint8)], axis=-1)
    elif channels == 1:
        pixels = pixels.mean(axis=-1, keepdims=True).astype(np.uint8)
    _tex_slot(model, tex)[...] = pixels.reshape(-1)
