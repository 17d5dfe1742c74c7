"""`factory train-eval --policy vla`: the tokenizer, the text encoder, and a real smoke run (Lift's
first seed demo rendered at 32x24, a few training steps, one short rollout)."""

from __future__ import annotations

import json

import demofactory  # noqa: F401  (selects the GL backend before robosuite)
import numpy as np
import pytest
import torch
from demofactory.build.seed_dataset import write_seed_dataset
from demofactory.cli.main import main
from demofactory.seeds.resolve import Resolved, resolve_spec
from demofactory.specs.spec import load_spec
from demofactory.train.config import TrainEvalConfig
from demofactory.train.core import TrainingData, eval_seed
from demofactory.train.policy import ObsLayout
from demofactory.train.train_eval import train_eval
from demofactory.train.vla import (
    InstructedPolicy,
    VlaArch,
    VlaPolicy,
    encode_texts,
    fit_tokenizer,
    load_vla,
    save_vla,
)
from demofactory.train.vla_train import episode_phrases, object_positions, train_vla

from tests.conftest import write_spec

PHRASES = ["lift the red cube", "pick up the blue block", "Raise the GREEN cube off the table"]


def test_tokenizer_round_trip():
    tokenizer = fit_tokenizer(PHRASES, max_tokens=12)
    ids, mask = encode_texts(tokenizer, ["lift the green block", "lift the purple cube"])
    assert ids.shape == mask.shape == (2, 12) and mask[0].sum() == 5  # [CLS] + 4 words
    assert tokenizer.decode(ids[0].tolist()) == "lift the green block"  # lower-cased on the way
    unk = tokenizer.token_to_id("[UNK]")
    assert ids[1, 3] == unk and unk not in ids[0]  # "purple": never seen
    again = type(tokenizer).from_str(tokenizer.to_str())
    np.testing.assert_array_equal(
        encode_texts(again, PHRASES)[0], encode_texts(tokenizer, PHRASES)[0]
    )


def test_text_encoder_output_depends_on_the_instruction():
    torch.manual_seed(0)
    tokenizer = fit_tokenizer(PHRASES)
    arch = VlaArch(10, 4, 1, (3, 24, 32), tokenizer.get_vocab_size(), hidden=32, layers=1)
    policy = VlaPolicy(arch).eval()
    red, blue = (
        InstructedPolicy(policy, tokenizer, t) for t in ("lift the red cube", "lift the blue cube")
    )
    assert red.text.shape == (1, arch.text_dim)
    assert not torch.allclose(red.text, blue.text)
    with torch.no_grad():  # FiLM starts as the identity: let the text reach the encoder too
        policy.vision[0].film.weight.normal_()
    frames = np.random.default_rng(0).integers(0, 255, (1, 24, 32, 3), dtype=np.uint8)
    obs = np.zeros(10, dtype=np.float32)
    assert red.act(obs, frames).shape == (4, 7)
    assert not np.allclose(red.act(obs, frames), blue.act(obs, frames))


@pytest.fixture(scope="module")
def camera_dataset(tmp_path_factory):
    """Lift's first seed demo (226 steps) rendered by one 32x24 camera, and the spec."""
    tmp = tmp_path_factory.mktemp("vla")
    spec_path = write_spec(
        tmp / "lift_cam.yaml",
        base="lift_lowdim.yaml",
        cameras=[{"name": "agentview", "width": 32, "height": 24}],
    )
    resolved = resolve_spec(load_spec(spec_path))
    resolved = Resolved(resolved.spec, resolved.scene, resolved.demos[:1])
    write_seed_dataset(resolved, tmp / "seeds")
    return tmp / "seeds", spec_path, resolved


@pytest.mark.sim
@pytest.mark.slow  # the module's dataset: 226 frames rendered (~15-30 s on 2 busy cores)
def test_vla_train_eval_smoke(camera_dataset, tmp_path):
    dataset, _, resolved = camera_dataset
    config = TrainEvalConfig(
        policy="vla",
        camera="agentview",
        horizon=4,
        execute=4,
        steps=40,
        batch_size=32,
        hidden=32,
        layers=1,
        rollouts=1,
        eval_horizon=6,
        lr=3e-3,
    )
    report = train_eval(dataset, resolved, config, save=tmp_path / "vla.pt")
    # The action term learns; the loss as a whole may rise at first, as the aux head's does.
    parts = report["loss_parts"]
    assert report["policy"]["kind"] == "vla"
    assert parts["final_action_loss"] < parts["first_action_loss"]
    assert 0 < parts["final_aux_error_m"] < 1.0  # metres, per coordinate
    # No privileged state: the observation is proprio (+ time), the scene's objects appear nowhere.
    names = report["observation"]["names"]
    assert names == [f"proprio[{i}]" for i in range(9)] + ["time"]
    assert not any(obj in n for obj in resolved.scene.bodies for n in names)
    assert report["observation"]["image_shape"] == [1, 3, 24, 32]
    rollout = report["per_rollout"][0]
    assert rollout["seed"] == eval_seed(resolved.spec.seed, 0) and rollout["steps"] <= 6
    assert rollout["instruction"] in resolved.spec.instructions  # Lift: no slots to fill
    assert report["instructions"]["distinct"] == 3  # the instruction and its two paraphrases
    # The auxiliary loss had the cube's position as its target, and only as a target.
    assert report["policy"]["aux_objects"] == {"weight": 1.0, "objects": ["cube"]}
    json.dumps(report)
    policy, tokenizer, saved = load_vla(tmp_path / "vla.pt")
    assert saved["config"]["policy"] == "vla" and saved["layout"]["objects"] == ()
    assert policy.aux is not None and policy.aux.out_features == 3
    assert policy.vision[0].fine.out_channels == 16  # the half-resolution keypoints
    frames = np.zeros((1, 24, 32, 3), dtype=np.uint8)
    obs = np.zeros(10, dtype=np.float32)
    bound = InstructedPolicy(policy, tokenizer, rollout["instruction"])
    assert bound.act(obs, frames).shape == (4, 7) and np.isfinite(bound.act(obs, frames)).all()


@pytest.mark.sim
@pytest.mark.slow
def test_shuffled_instructions_and_flags(camera_dataset, capsys):
    dataset, spec_path, _ = camera_dataset
    instructions = {0: "lift the red cube", 1: "pick up the red cube", 2: "raise it"}
    kept = episode_phrases(dataset, instructions, shuffle=False, seed=0)
    assert kept[0][0] == "lift the red cube" and len(kept[0]) == 3  # + the paraphrases stored
    mixed = episode_phrases(dataset, instructions, shuffle=True, seed=0)
    assert sorted(mixed.values()) == sorted(kept.values()) and mixed != kept
    assert mixed == episode_phrases(dataset, instructions, shuffle=True, seed=0)
    base = ["train-eval", str(dataset), "--spec", str(spec_path), "--steps", "1", "--quiet"]
    assert main([*base, "--policy", "vla"]) == 2  # needs --camera
    assert "--camera" in capsys.readouterr().err
    assert main([*base, "--shuffle-instructions"]) == 2  # an MLP reads no instruction
    capsys.readouterr()
    assert main([*base, "--aux-objects", "2"]) == 2  # an MLP has no keypoints to train
    assert "--aux-objects, --fine-keypoints: only with --policy vla" in capsys.readouterr().err
    for weight in ("-1", "inf", "nan"):
        assert (
            main([*base, "--policy", "vla", "--camera", "agentview", "--aux-objects", weight]) == 2
        )
        assert "--aux-objects" in capsys.readouterr().err
    noisy = ["--policy", "vla", "--camera", "agentview", "--sensor-noise", '{"state_std": 0.01}']
    assert main([*base, *noisy]) == 2  # refused, not silently ignored
    assert "--sensor-noise: only with --policy mlp" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--policy", "transformer"])


def test_object_positions_read_the_free_joints():
    layout = ObsLayout(("a", "b"), (2, 9))
    state = np.arange(2 * 30, dtype=np.float64).reshape(2, 30)  # time, qpos..., qvel...
    got = object_positions(state, layout)
    assert got.dtype == np.float32 and got.shape == (2, 6)
    np.testing.assert_array_equal(got[1], state[1, [3, 4, 5, 10, 11, 12]])


def test_aux_loss_puts_keypoints_on_the_object():
    """Frames with one bright square at a random place; the square's (x, y) is the auxiliary
    target. With the loss on, the affine head reads the square's place off the keypoints; with
    it off, the head does not exist. The action is constant, so only the aux loss can teach
    the encoder where the square is."""
    rng = np.random.default_rng(0)
    n, h, w = 256, 24, 32
    xy = rng.uniform(0.15, 0.85, (n, 2))
    images = np.zeros((n, 1, 3, h, w), dtype=np.uint8)
    for i, (x, y) in enumerate(xy):
        r, c = int(y * h), int(x * w)
        images[i, 0, :, r - 2 : r + 2, c - 2 : c + 2] = 255
    positions = np.concatenate([xy, np.zeros((n, 1))], axis=1).astype(np.float32)
    data = TrainingData(
        np.zeros((n, 9), np.float32),
        np.zeros((n, 4, 7), np.float32),
        np.ones((n, 4), bool),
        np.arange(n) // 16,
        tuple(range(n // 16)),
        images,
    )
    phrases = {ep: ("lift the cube",) for ep in range(n // 16)}
    config = TrainEvalConfig(
        policy="vla", horizon=4, steps=300, batch_size=32, hidden=32, layers=1, lr=3e-3
    )
    policy, tokenizer, _ = train_vla(data, phrases, config, positions=positions)
    text = InstructedPolicy(policy, tokenizer, "lift the cube").text.expand(n, -1)
    with torch.no_grad():
        _, points = policy.forward_with_points(
            torch.zeros(n, 9), torch.from_numpy(images).float() / 255.0, text
        )
        pred = policy.locate(points).numpy()[:, :2]  # in the targets' own units
    r2 = 1 - ((pred - xy) ** 2).mean() / xy.var(0).mean()
    assert r2 > 0.8, r2
    off = config.model_copy(update={"aux_objects": 0.0, "steps": 1})
    unaided = train_vla(data, phrases, off, positions=positions)[0]
    assert unaided.aux is None
    with pytest.raises(ValueError, match="without the auxiliary loss"):
        unaided.locate(points)


def test_a_policy_saved_before_fine_keypoints_and_aux_still_loads(tmp_path):
    """Files written before `fine_keypoints` and `aux_dim` existed have neither key: they load
    as the encoder they were (coarse keypoints only, no auxiliary head) and act the same."""
    torch.manual_seed(0)
    tokenizer = fit_tokenizer(PHRASES)
    arch = VlaArch(10, 4, 1, (3, 24, 32), tokenizer.get_vocab_size(), hidden=32, layers=1)
    policy = VlaPolicy(arch).eval()
    save_vla(tmp_path / "old.pt", policy, tokenizer, {}, {})
    saved = torch.load(tmp_path / "old.pt", weights_only=False)
    for key in ("fine_keypoints", "aux_dim"):
        del saved["arch"][key]
    torch.save(saved, tmp_path / "old.pt")
    loaded, tokenizer, _ = load_vla(tmp_path / "old.pt")
    assert loaded.vision[0].fine is None and loaded.aux is None
    frames = np.random.default_rng(1).integers(0, 255, (1, 24, 32, 3), dtype=np.uint8)
    obs = np.zeros(10, dtype=np.float32)
    before = InstructedPolicy(policy, tokenizer, PHRASES[0]).act(obs, frames)
    np.testing.assert_array_equal(
        InstructedPolicy(loaded, tokenizer, PHRASES[0]).act(obs, frames), before
    )
