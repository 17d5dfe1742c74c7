"""Language that matches the pixels: instructions filled from the episode's own objects.

    attempt seed ──► template: instructions[seed % n] (as for every spec)
                 ──► colours: each object with `color: {palette: P}` draws one from P; objects
                     drawing from the same palette get different colours while P has enough
                 ──► slots {object.name} / {object.color} filled from those attributes
                 ──► EpisodeLanguage(instruction, attributes, rgba)  ──► provenance["language"]
                 ──► subtasks[i].instruction filled alike ──► provenance["subtask_instructions"]
    render time ──► paint_objects: the drawn rgba into the objects' geoms, undone after the episode

The draws use their own stream of the attempt seed, so a spec without a `scene:` section gets
exactly the instruction it always got.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
from demofactory.specs.scene import COLORS, PaletteColor, SceneSection

LANGUAGE_STREAM = 0x1A6  # SeedSequence key: colour draws independent of placement and noise


@dataclass(frozen=True)
class EpisodeLanguage:
    """What an episode's instruction says and the colours it was drawn with.

    attributes: object -> {"name": noun, "color": colour name}; rgba: object -> drawn (r, g, b, a)
    for objects whose colour comes from a palette. paraphrases: the spec's other instructions,
    filled with the same attributes (empty when the spec gives one phrasing).
    """

    instruction: str
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    rgba: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)
    paraphrases: tuple[str, ...] = ()
    # per spec subtask: its instruction filled alike (subtasks[i].instruction; the episode's
    # instruction where a subtask gives none); empty when no subtask gives one
    subtasks: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"attributes": self.attributes}


def nearest_color_name(rgba) -> str:
    """The named colour closest to an rgba (for objects given as [r, g, b, a])."""
    target = np.asarray(rgba[:3], dtype=np.float64)
    return min(COLORS, key=lambda n: float(np.linalg.norm(np.asarray(COLORS[n][:3]) - target)))


def draw_colors(scene: SceneSection, seed: int) -> dict[str, str]:
    """Colour name per object with a palette colour, drawn from the attempt seed."""
    rng = np.random.default_rng([seed, LANGUAGE_STREAM])
    taken: dict[str, set[str]] = {}
    drawn = {}
    for name, obj in scene.objects.items():  # in spec order: the same draws for the same seed
        if not isinstance(obj.color, PaletteColor):
            continue
        palette = scene.palette(obj.color.palette)
        used = taken.setdefault(obj.color.palette, set())
        free = [c for c in palette if c not in used] or list(palette)
        drawn[name] = free[int(rng.integers(len(free)))]
        used.add(drawn[name])
    return drawn


def episode_language(spec, seed: int) -> EpisodeLanguage:
    """The instruction of the episode from attempt `seed`, with the attributes it names."""
    chosen = seed % len(spec.instructions)
    template = spec.instructions[chosen]
    others = [t for i, t in enumerate(spec.instructions) if i != chosen]
    scene: SceneSection | None = spec.scene
    given = [getattr(sub, "instruction", None) for sub in spec.subtasks]
    if scene is None:
        subtasks = tuple(text or template for text in given) if any(given) else ()
        return EpisodeLanguage(template, paraphrases=_unique(others, template), subtasks=subtasks)
    drawn = draw_colors(scene, seed)
    attributes = {}
    for name, obj in scene.objects.items():
        attrs = {"name": obj.noun or name}
        if name in drawn:
            attrs["color"] = drawn[name]
        elif isinstance(obj.color, str):
            attrs["color"] = obj.color
        elif obj.color is not None:
            attrs["color"] = nearest_color_name(obj.color)
        attributes[name] = attrs
    # str.format reads {cube.color} as the attribute `color` of the value named `cube`.
    slots = {o: SimpleNamespace(**a) for o, a in attributes.items()}
    instruction = template.format(**slots)
    rgba = {name: COLORS[colour] for name, colour in drawn.items()}
    paraphrases = _unique([t.format(**slots) for t in others], instruction)
    subtasks = tuple(t.format(**slots) if t else instruction for t in given) if any(given) else ()
    return EpisodeLanguage(instruction, attributes, rgba, paraphrases, subtasks)


def _unique(texts: list[str], chosen: str) -> tuple[str, ...]:
    """`texts` in order, without repeats and without the chosen instruction."""
    return tuple(dict.fromkeys(t for t in texts if t != chosen))


def paint_objects(scene, rgba: dict[str, tuple]) -> Callable[[], None]:
    """Give each named object's geoms (visual and collision) the rgba drawn for the episode;
    returns the function that puts the model's colours back."""
    model = scene.model
    saved = []
    for name, color in rgba.items():
        ids = np.flatnonzero(model.geom_bodyid == scene.bodies[name])
        saved.append((ids, model.geom_rgba[ids].copy()))
        model.geom_rgba[ids] = color

    def undo() -> None:
        for ids, values in saved:
            model.geom_rgba[ids] = values

    return undo
