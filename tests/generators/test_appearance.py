"""Appearance variants on real robosuite scenes: procedural patterns, draws, apply/restore
against the real MuJoCo model and renderer, physics untouched, and K variants per trajectory
through ShardWorker."""

from __future__ import annotations

import io
import json
import tarfile
import typing
from pathlib import Path

import numpy as np
import pytest
from demofactory.build.pipeline import ShardWorker
from demofactory.build.preview import sheet_records
from demofactory.build.records import plan_shards
from demofactory.errors import UserError
from demofactory.generators.appearance import (
    AppearanceDraw,
    AppearanceRandomizer,
    draw_appearance,
    variant_rng,
)
from demofactory.generators.textures import PATTERNS, fit_texture, make_pattern
from demofactory.seeds.resolve import resolve_spec
from demofactory.shards import load_episodes, save_episodes, shards_dir
from demofactory.simulation.render import FrameRenderer, encode_jpeg
from demofactory.simulation.scene import Placement, Scene
from demofactory.specs.adapters import appearance_params
from demofactory.specs.spec import TextureRandomization, load_spec
from PIL import Image

from tests.conftest import write_spec

SIZE = 32  # pixels, every camera here
APPEARANCE = {
    "variants_per_trajectory": 2,
    "textures": {"surfaces": ["table", "floor", "walls", "cubeA", "cubeB"]},
    "lights": {"position": 0.3, "direction": 0.3, "intensity": [0.5, 1.2], "color": 0.2},
    "camera": {"position": 0.02, "orientation": 0.05},
}
MODEL_ARRAYS = (
    "tex_data",
    "mat_rgba",
    "geom_rgba",
    "light_pos",
    "light_dir",
    "light_diffuse",
    "cam_pos",
    "cam_quat",
)


# --- patterns and draws (no simulator) ---------------------------------------------------------


def test_the_spec_offers_exactly_the_registered_patterns():
    literal = typing.get_args(TextureRandomization.model_fields["patterns"].annotation)[0]
    assert set(typing.get_args(literal)) == set(PATTERNS)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_patterns_are_deterministic_per_seed_and_shaped(name):
    colors = np.array([[0.9, 0.1, 0.2], [0.1, 0.3, 0.8]])
    first = make_pattern(name, np.random.default_rng(7), 48, colors)
    again = make_pattern(name, np.random.default_rng(7), 48, colors)
    assert first.shape == (48, 48, 3) and first.dtype == np.uint8
    assert first.tobytes() == again.tobytes()
    # Only the two colours (and mixes of them) appear: every pixel is on the segment between them.
    low, high = np.round(colors.min(0) * 255) - 1, np.round(colors.max(0) * 255) + 1
    assert np.all(first >= low) and np.all(first <= high)
    if name != "solid":
        others = [
            make_pattern(name, np.random.default_rng(s), 48, colors).tobytes() for s in range(8, 12)
        ]
        assert any(o != first.tobytes() for o in others)
        assert len(np.unique(first.reshape(-1, 3), axis=0)) > 1


def test_fit_texture_resizes_by_nearest_neighbour():
    image = np.arange(2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 3)
    fitted = fit_texture(image, 4, 6)
    assert fitted.shape == (4, 6, 3)
    assert (fitted[:2, :3] == image[0, 0]).all() and (fitted[2:, 3:] == image[1, 1]).all()


@pytest.fixture(scope="module")
def stack_spec(tmp_path_factory):
    path = write_spec(
        tmp_path_factory.mktemp("appearance") / "stack_app.yaml",
        base="stack.yaml",
        name="stack_app",
        cameras=[
            {"name": "agentview", "width": SIZE, "height": SIZE},
            {"name": "robot0_eye_in_hand", "width": SIZE, "height": SIZE},
        ],
        appearance=APPEARANCE,
    )
    return load_spec(path)


def test_draws_are_deterministic_json_and_round_trip(stack_spec):
    params = appearance_params(stack_spec)
    draw = draw_appearance(params, variant_rng(0, 12345, 1), lights=2)
    assert draw == draw_appearance(params, variant_rng(0, 12345, 1), lights=2)
    assert draw != draw_appearance(params, variant_rng(0, 12345, 2), lights=2)
    data = json.loads(json.dumps(draw.to_json()))
    assert AppearanceDraw.from_json(data) == draw
    assert set(data["surfaces"]) == {"table", "floor", "walls", "cubeA", "cubeB"}
    assert len(data["lights"]) == 2 and set(data["cameras"]) == {"agentview", "robot0_eye_in_hand"}
    for light in draw.lights:
        assert 0.5 <= light.intensity <= 1.2 and all(abs(x) <= 0.3 for x in light.position)
    for cam in draw.cameras.values():
        assert (
            all(abs(x) <= 0.02 for x in cam.position)
            and np.linalg.norm(cam.rotation) <= 0.05 + 1e-6
        )
    for look in draw.surfaces.values():
        assert look.pattern in PATTERNS and look.bank_image is None  # no bank in this spec


# --- a real Stack scene --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(stack_spec):
    scene = Scene(stack_spec)
    renderer = FrameRenderer(scene, stack_spec.cameras, stack_spec.render)
    randomizer = AppearanceRandomizer(
        appearance_params(stack_spec), scene.model, upload=renderer.upload_textures
    )
    yield scene, renderer, randomizer
    renderer.close()


def _render(scene: Scene, renderer: FrameRenderer) -> dict[str, np.ndarray]:
    scene.set_state(scene.get_state())  # camera and light poses are computed by mj_forward
    return renderer.render_current()


def _model_bytes(scene: Scene) -> dict[str, bytes]:
    return {name: getattr(scene.model, name).tobytes() for name in MODEL_ARRAYS}


def test_two_draws_render_differently_and_restore_returns_every_byte(stack, stack_spec):
    scene, renderer, randomizer = stack
    scene.reset_to(None, Placement({}))
    before, original = _model_bytes(scene), _render(scene, renderer)
    images = []
    for k in (1, 2):
        randomizer.apply(randomizer.draw(variant_rng(stack_spec.seed, 99, k)))
        images.append(_render(scene, renderer))
        assert _model_bytes(scene) != before
        randomizer.restore()
        assert _model_bytes(scene) == before
    for cam in ("agentview", "robot0_eye_in_hand"):
        assert not np.array_equal(images[0][cam], images[1][cam])
        assert not np.array_equal(images[0][cam], original[cam])
    again = _render(scene, renderer)  # GL textures re-uploaded: the original scene exactly
    assert all(np.array_equal(again[c], original[c]) for c in original)


def test_physics_is_bit_identical_with_and_without_appearance_changes(stack, stack_spec):
    scene, renderer, randomizer = stack
    actions = np.random.default_rng(3).uniform(-1, 1, (15, 7))
    scene.reset_to(None, Placement({}))  # robosuite's reset draws cube poses: fix one start state
    start = scene.get_state()

    def rollout(draw: AppearanceDraw | None) -> bytes:
        scene.reset_to(start, Placement({}))
        if draw is not None:
            randomizer.apply(draw)
        for action in actions:
            scene.step(action)
            if draw is not None:
                renderer.render_current()
        if draw is not None:
            randomizer.restore()
        return scene.get_state().tobytes()

    plain = rollout(None)
    assert rollout(None) == plain  # the comparison is meaningful: a plain rollout repeats exactly
    assert rollout(randomizer.draw(variant_rng(stack_spec.seed, 5, 1))) == plain
    assert rollout(None) == plain


def test_camera_jitter_moves_the_image_relative_to_its_parent(stack, stack_spec):
    scene, renderer, randomizer = stack
    scene.reset_to(None, Placement({}))
    original, cam_pos = _render(scene, renderer), scene.model.cam_pos.copy()
    only_camera = AppearanceDraw(
        cameras=randomizer.draw(variant_rng(stack_spec.seed, 7, 1)).cameras
    )
    randomizer.apply(only_camera)
    moved = _render(scene, renderer)
    # cam_pos is in the parent body's frame: the hand camera moved relative to the hand.
    hand = randomizer.cameras["robot0_eye_in_hand"]
    assert scene.model.cam_bodyid[hand] != 0
    assert np.allclose(
        scene.model.cam_pos[hand] - cam_pos[hand],
        only_camera.cameras["robot0_eye_in_hand"].position,
    )
    randomizer.restore()
    for cam in original:
        assert np.abs(moved[cam].astype(int) - original[cam]).mean() > 1.0
    back = _render(scene, renderer)
    assert all(np.array_equal(back[c], original[c]) for c in original)


def test_bank_images_are_written_into_the_surface_textures(stack, stack_spec):
    scene = stack[0]
    spec = _bank_spec(stack_spec, ["table", "cubeA"])
    red = np.zeros((16, 16, 3), np.uint8)
    red[..., 0] = 200
    before = _model_bytes(scene)
    randomizer = AppearanceRandomizer(appearance_params(spec), scene.model, bank=[red])
    draw = randomizer.draw(np.random.default_rng(0))
    assert {look.bank_image for look in draw.surfaces.values()} == {0}
    randomizer.apply(draw)
    for name in ("table", "cubeA"):
        for tex in randomizer.surfaces[name].textures:
            adr, n = (
                scene.model.tex_adr[tex],
                scene.model.tex_width[tex] * scene.model.tex_height[tex] * 3,
            )
            pixels = scene.model.tex_data[adr : adr + n].reshape(-1, 3)
            assert (pixels == [200, 0, 0]).all()
    randomizer.restore()  # no upload given: the GL copies were never changed either
    assert _model_bytes(scene) == before


def _bank_spec(spec, surfaces):
    bank = {"model": "unused/for-this-test", "prompts": ["wood"], "share": 1.0}
    textures = TextureRandomization.model_validate({"surfaces": surfaces, "bank": bank})
    return spec.model_copy(
        update={"appearance": spec.appearance.model_copy(update={"textures": textures})}
    )


def test_a_spec_with_a_bank_refuses_a_dataset_without_one(stack, stack_spec, tmp_path):
    worker = ShardWorker(_bank_spec(stack_spec, ["table"]), [], stack[0])
    with pytest.raises(UserError, match="no texture bank"):
        worker.load_bank(tmp_path)
    worker.close()


# --- K variants per trajectory through the pipeline ---------------------------------------------


@pytest.fixture(scope="module")
def variant_shard(tmp_path_factory):
    """One real shard of Lift, K = 2, written by ShardWorker.run_shard; episodes.jsonl saved."""
    path = write_spec(
        tmp_path_factory.mktemp("variants") / "lift_k2.yaml",
        name="lift_k2",
        task={"horizon": 300},  # ~300 frames a variant
        generation={"attempts": 1, "attempts_per_shard": 1},
        cameras=[{"name": "agentview", "width": SIZE, "height": SIZE}],
        render={"shadows": False},  # ~2x fewer GL passes per frame; nothing here looks at shadows
        appearance={
            "variants_per_trajectory": 2,
            "textures": {"surfaces": ["table", "cube"]},
            "lights": {"intensity": [0.5, 1.5], "color": 0.2},
            "camera": {"position": 0.03},
        },
    )
    spec = load_spec(path)
    resolved = resolve_spec(spec)
    worker = ShardWorker(spec, resolved.demos, resolved.scene)
    out = tmp_path_factory.mktemp("variants_out")
    result = worker.run_shard(plan_shards(spec)[0], out)
    save_episodes(out, result.episodes)
    yield spec, worker, result, out
    worker.close()


def test_k_variants_make_k_episodes_per_success(variant_shard):
    spec, worker, result, out = variant_shard
    assert result.attempts == 1 and result.successes == 1
    assert len(result.episodes) == 2 * result.successes
    by_trajectory: dict[int, list] = {}
    for record in result.episodes:
        by_trajectory.setdefault(record.provenance["trajectory"], []).append(record)
    for attempt_id, records in by_trajectory.items():
        assert [r.index for r in records] == [2 * attempt_id, 2 * attempt_id + 1]
        assert [r.provenance["variant"] for r in records] == [0, 1]
        original, varied = (AppearanceDraw.from_json(r.provenance["appearance"]) for r in records)
        assert (
            original.is_original and not varied.is_original
        )  # keep_original: variant 0 as modelled
        assert len({r.length for r in records}) == 1 and len({r.seed for r in records}) == 1
    assert len({r.index for r in result.episodes}) == len(result.episodes)
    # Same states, different looks: the tar holds different first frames for the two variants.
    frames = _first_frames(out / "shards" / result.info.name)
    for records in by_trajectory.values():
        assert frames[records[0].index] != frames[records[1].index]


def _first_frames(shard: Path) -> dict[int, bytes]:
    frames = {}
    with tarfile.open(shard) as tar:
        for member in tar:
            if member.name.endswith("_t0000.agentview.jpg"):
                frames[int(member.name[1:9])] = tar.extractfile(member).read()
    return frames


def test_provenance_round_trips_through_episodes_jsonl_and_rerenders_the_frame(variant_shard):
    spec, worker, result, out = variant_shard
    loaded = {r.index: r for r in load_episodes(out)}
    assert loaded == {r.index: r for r in result.episodes}
    frames = _first_frames(shards_dir(out) / result.info.name)
    varied = next(r for r in loaded.values() if r.provenance["variant"] == 1)
    # The record alone (draw + state) reproduces the stored frame byte for byte.
    with tarfile.open(shards_dir(out) / result.info.name) as tar:
        state = np.load(
            io.BytesIO(tar.extractfile(f"e{varied.index:08d}_t0000.sim_state.npy").read())
        )
    worker.appearance.apply(AppearanceDraw.from_json(varied.provenance["appearance"]))
    worker.scene.set_state(state)
    image = worker.renderer.render_current()["agentview"]
    worker.appearance.restore()
    assert encode_jpeg(image, spec.render.jpeg_quality) == frames[varied.index]
    assert np.asarray(Image.open(io.BytesIO(frames[varied.index]))).shape == (SIZE, SIZE, 3)


def test_the_contact_sheet_keeps_a_trajectorys_variants_together(variant_shard):
    _, _, result, _ = variant_shard
    records = sorted(result.episodes, key=lambda r: r.index)
    chosen = sheet_records(records, episodes=1)
    first = records[0].provenance["trajectory"]
    assert [r.provenance["variant"] for r in chosen] == [0, 1]
    assert all(r.provenance["trajectory"] == first for r in chosen)
