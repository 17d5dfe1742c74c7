"""Sensor and timing randomization in the loader (demofactory.shards.sensor_noise) over tiny real
datasets."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from demofactory.shards.loader import LoaderConfig, make_loader
from demofactory.shards.sensor_noise import (
    SensorNoise,
    delivered_frames,
    perturb_episode,
    resolve_sensor_noise,
)
from demofactory.shards.stages import EpisodeArrays
from PIL import Image
from torch.utils.data import DataLoader

from tests.shards.test_loader import CAMERAS, STATE_DIM, BuiltDataset, _unbatch, build_dataset

# 32 episodes of 8 steps in 4 shards: enough draws for the statistics, still under a second to read.
MANY = ((8,) * 8,) * 4


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> BuiltDataset:
    return build_dataset(tmp_path_factory.mktemp("noise") / "tiny")


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> BuiltDataset:
    return build_dataset(tmp_path_factory.mktemp("noise_many") / "many", layout=MANY, seed=1)


def _by_key(samples) -> dict[tuple[int, int], dict]:
    return {(int(s["episode"]), int(s["step"])): s for s in samples}


def _states(ds) -> dict[tuple[int, int], np.ndarray]:
    return {k: s["state"].numpy().astype(np.float64) for k, s in _by_key(ds).items()}


def _decoded(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")).transpose(2, 0, 1)


def _same_item(a: dict, b: dict) -> bool:
    def flat(item):
        out = {k: v for k, v in item.items() if k != "images"}
        out.update({f"images/{c}": v for c, v in item["images"].items()})
        return out

    fa, fb = flat(a), flat(b)
    return fa.keys() == fb.keys() and all(
        torch.equal(fa[k], fb[k]) if isinstance(fa[k], torch.Tensor) else fa[k] == fb[k] for k in fa
    )


def test_zero_config_is_bit_identical(dataset) -> None:
    plain = list(make_loader(dataset.path, action_horizon=3, extra_keys=["sim_state"]))
    for noise in (SensorNoise(), SensorNoise(seed=7), {"state_std": [0.0] * STATE_DIM}):
        noised = list(
            make_loader(
                dataset.path, action_horizon=3, extra_keys=["sim_state"], sensor_noise=noise
            )
        )
        assert len(noised) == len(plain)
        assert all(_same_item(a, b) for a, b in zip(plain, noised, strict=True))


def test_state_noise_has_the_configured_statistics(many) -> None:
    std = np.linspace(0.1, 0.9, STATE_DIM)
    noised = make_loader(
        many.path, cameras=[], normalization="none", sensor_noise=SensorNoise(state_std=std)
    )
    diffs = np.stack(
        [s - many.episodes[e].states[t] for (e, t), s in sorted(_states(noised).items())]
    )
    n = len(diffs)
    assert n == sum(many.steps().values()) == 256
    assert np.all(np.abs(diffs.mean(axis=0)) < 4 * std / np.sqrt(n))  # mean ~ 0
    np.testing.assert_allclose(diffs.std(axis=0), std, rtol=0.2)  # std ~ configured, per dim
    # Independent from step to step: the noise of consecutive steps is uncorrelated.
    episodes = sorted({e for e, _ in _states(noised)})
    per_episode = diffs.reshape(len(episodes), 8, STATE_DIM)
    lag = np.mean(per_episode[:, 1:] * per_episode[:, :-1], axis=(0, 1)) / std**2
    assert np.all(np.abs(lag) < 0.3)


def test_state_bias_is_constant_in_an_episode_and_differs_across(many) -> None:
    noised = make_loader(
        many.path, cameras=[], normalization="none", sensor_noise={"state_bias_std": 0.5}
    )
    diffs: dict[int, list[np.ndarray]] = {}
    for (e, t), state in sorted(_states(noised).items()):
        diffs.setdefault(e, []).append(state - many.episodes[e].states[t])
    biases = []
    for steps in diffs.values():
        np.testing.assert_allclose(steps, np.repeat(steps[:1], len(steps), 0), atol=1e-5)
        biases.append(steps[0])
    biases = np.array(biases)  # [32 episodes, S]
    assert len({b.round(4).tobytes() for b in biases}) == len(biases)  # each episode its own
    assert abs(biases.mean()) < 4 * 0.5 / np.sqrt(biases.size)
    assert 0.4 < biases.std() < 0.6


def test_noise_is_added_in_raw_units_before_normalization(many) -> None:
    noise = SensorNoise(state_std=0.3, state_bias_std=0.2, seed=3)
    raw = _states(make_loader(many.path, cameras=[], normalization="none", sensor_noise=noise))
    normed = _states(
        make_loader(many.path, cameras=[], normalization="mean_std", sensor_noise=noise)
    )
    stats = json.loads((many.path / "stats.json").read_text())["state"]
    mean, std = np.array(stats["mean"]), np.array(stats["std"])
    for key, value in normed.items():
        np.testing.assert_allclose(value, (raw[key] - mean) / std, rtol=1e-5, atol=1e-5)


def _signature(dataset, noise, **loader_kw) -> dict[tuple[int, int], bytes]:
    ds = make_loader(dataset.path, action_horizon=2, sensor_noise=noise, **loader_kw.pop("ds", {}))
    samples = _unbatch(DataLoader(ds, **loader_kw))
    return {
        (s["episode"], s["step"]): s["state"].numpy().tobytes()
        + b"".join(s["images"][c].numpy().tobytes() for c in CAMERAS)
        for s in samples
    }


def test_samples_do_not_depend_on_workers_batches_or_shuffling(dataset) -> None:
    noise = SensorNoise(state_std=0.1, state_bias_std=0.2, frame_drop=0.4, latency=1, seed=11)
    reference = _signature(dataset, noise, batch_size=1, num_workers=0)
    assert len(reference) == sum(dataset.steps().values())
    assert _signature(dataset, noise, batch_size=5, num_workers=2) == reference
    shuffled = {"shuffle_buffer": 8, "seed": 4}
    assert _signature(dataset, noise, batch_size=3, num_workers=2, ds=shuffled) == reference
    other = _signature(dataset, SensorNoise(state_std=0.1, seed=12), batch_size=4)
    assert all(other[k] != reference[k] for k in reference)

    ds = make_loader(dataset.path, action_horizon=2, sensor_noise=noise)
    ds.set_epoch(1)  # fresh noise each epoch, the same again for the same epoch
    first = {k: v["state"] for k, v in _by_key(ds).items()}
    assert all(torch.equal(first[k], v["state"]) for k, v in _by_key(ds).items())
    epoch0 = _by_key(make_loader(dataset.path, action_horizon=2, sensor_noise=noise))
    assert all(not torch.equal(first[k], epoch0[k]["state"]) for k in first)


def test_latency_shifts_observations_not_actions(dataset) -> None:
    latency = 2
    plain = _by_key(
        make_loader(dataset.path, action_horizon=3, normalization="none", extra_keys=["sim_state"])
    )
    delayed = _by_key(
        make_loader(
            dataset.path,
            action_horizon=3,
            normalization="none",
            extra_keys=["sim_state"],
            sensor_noise=SensorNoise(latency=latency),
        )
    )
    assert delayed.keys() == plain.keys()
    for (e, t), s in delayed.items():
        ep, seen = dataset.episodes[e], max(t - latency, 0)
        np.testing.assert_array_equal(s["state"].numpy(), ep.states[seen].astype(np.float32))
        np.testing.assert_array_equal(s["sim_state"].numpy(), ep.sim_states[seen])
        for camera in CAMERAS:
            np.testing.assert_array_equal(
                s["images"][camera].numpy(), _decoded(ep.images[camera][seen])
            )
        torch.testing.assert_close(s["action_chunk"], plain[(e, t)]["action_chunk"])
        assert torch.equal(s["action_mask"], plain[(e, t)]["action_mask"])


def test_frame_drops_repeat_the_previous_frame_at_rate_p(many) -> None:
    p = 0.3
    noise = SensorNoise(frame_drop=p, seed=5)
    samples = _by_key(make_loader(many.path, normalization="none", sensor_noise=noise))
    dropped, eligible, masks = 0, 0, {c: [] for c in CAMERAS}
    for e, ep in many.episodes.items():
        for camera in CAMERAS:
            references = [_decoded(jpeg) for jpeg in ep.images[camera]]
            shown = []
            for t in range(ep.length):
                image = samples[(e, t)]["images"][camera].numpy()
                shown.append(next(i for i, r in enumerate(references) if np.array_equal(image, r)))
            assert shown[0] == 0  # the first frame is never dropped
            for t in range(1, ep.length):
                assert shown[t] in (t, shown[t - 1])  # delivered, or the previous one repeated
            dropped += sum(shown[t] != t for t in range(1, ep.length))
            eligible += ep.length - 1
            masks[camera].append(shown)
            assert shown == delivered_frames(noise, 0, e, camera, ep.length).tolist()
        np.testing.assert_array_equal(samples[(e, 3)]["state"].numpy(), ep.states[3])
    assert abs(dropped / eligible - p) < 0.08  # 448 draws: 4 standard deviations
    assert masks[CAMERAS[0]] != masks[CAMERAS[1]]  # each camera drops on its own


def test_depth_and_labels_follow_their_camera() -> None:
    # Depth/label PNGs are frames of their camera: they drop and lag with its JPEGs.
    length = 40
    ep = EpisodeArrays(
        index=3,
        instruction="lift",
        actions=np.zeros((length, 7)),
        states=np.arange(length, dtype=np.float64)[:, None].repeat(2, 1),
        frames={"front": tuple(b"f%d" % t for t in range(length))},
        extras={"sim_state": np.arange(length)[:, None]},
        pngs={
            "front_depth.png": tuple(b"d%d" % t for t in range(length)),
            "side_segmentation.png": tuple(b"s%d" % t for t in range(length)),
        },
    )
    out = perturb_episode(ep, SensorNoise(frame_drop=0.5, latency=1, seed=2), epoch=0)
    front = [int(f[1:]) for f in out.frames["front"]]
    assert [int(d[1:]) for d in out.pngs["front_depth.png"]] == front
    side = [int(s[1:]) for s in out.pngs["side_segmentation.png"]]
    assert side != front and side[:2] == [0, 0]
    drops = delivered_frames(SensorNoise(frame_drop=0.5, seed=2), 0, 3, "front", length)
    assert front == [int(drops[max(t - 1, 0)]) for t in range(length)]
    assert out.extras["sim_state"][:, 0].tolist() == [max(t - 1, 0) for t in range(length)]
    np.testing.assert_array_equal(out.actions, ep.actions)


def test_the_loader_reports_its_sensor_noise(dataset) -> None:
    noise = SensorNoise(state_std=[0.01] * STATE_DIM, frame_drop=0.1, latency=2, seed=9)
    reported = make_loader(dataset.path, sensor_noise=noise).config.to_json()
    assert json.loads(json.dumps(reported))["sensor_noise"] == {
        "state_std": [0.01] * STATE_DIM,
        "state_bias_std": 0.0,
        "frame_drop": 0.1,
        "latency": 2,
        "seed": 9,
    }
    assert SensorNoise.from_json(reported["sensor_noise"]) == noise
    assert make_loader(dataset.path).config.to_json()["sensor_noise"] is None


@pytest.mark.parametrize(
    ("noise", "message"),
    [
        ({"state_std": -0.1}, r"sensor_noise.state_std must be finite and >= 0, got -0.1"),
        ({"state_bias_std": [0.1, -1]}, r"sensor_noise.state_bias_std must be finite and >= 0"),
        ({"state_std": float("nan")}, r"sensor_noise.state_std must be finite"),
        ({"state_std": "0.1"}, r"sensor_noise.state_std must be a number or a list"),
        ({"frame_drop": 1.5}, r"sensor_noise.frame_drop must be a probability in \[0, 1\]"),
        ({"frame_drop": -0.1}, r"sensor_noise.frame_drop must be a probability in \[0, 1\]"),
        ({"latency": -1}, r"sensor_noise.latency must be an integer >= 0, got -1"),
        ({"latency": 1.5}, r"sensor_noise.latency must be an integer >= 0, got 1.5"),
        ({"seed": -3}, r"sensor_noise.seed must be an integer >= 0"),
        ({"lag": 2}, r"unknown keys \['lag'\]; valid keys are \['state_std', "),
    ],
)
def test_bad_settings_are_named(dataset, noise, message) -> None:
    with pytest.raises(ValueError, match=message):
        make_loader(dataset.path, sensor_noise=noise)


def test_per_dimension_std_must_match_the_state(dataset) -> None:
    noise = SensorNoise(state_std=[0.1, 0.2])
    with pytest.raises(
        ValueError, match=r"state_std has 2 entries, dataset_info.json's state has 9"
    ):
        resolve_sensor_noise(noise, {"state": {"dim": 9}})
    # tests' dataset_info lists no state dim: the first episode read tells
    ds = make_loader(dataset.path, cameras=[], sensor_noise=noise)
    with pytest.raises(ValueError, match=r"state_std has 2 entries, episode 0's state has 9"):
        next(iter(ds))
    with pytest.raises(TypeError, match="sensor_noise must be a SensorNoise or None"):
        LoaderConfig(cameras=None, sensor_noise={"latency": 1})


def test_train_eval_takes_sensor_noise_as_json_and_reports_every_setting(tmp_path) -> None:
    from demofactory.train.config import TrainEvalConfig

    from tests.cli.test_cli_errors import assert_user_error, factory

    config = TrainEvalConfig(sensor_noise='{"latency": 2, "state_std": [0.1, 0.2]}')
    assert config.model_dump()["sensor_noise"] == {
        "state_std": [0.1, 0.2],
        "state_bias_std": 0.0,
        "frame_drop": 0.0,
        "latency": 2,
        "seed": 0,
    }
    assert TrainEvalConfig(**config.model_dump()) == config  # a saved config loads back
    assert TrainEvalConfig().model_dump()["sensor_noise"] is None
    result = factory(
        tmp_path, "train-eval", tmp_path, "--spec", "x.yaml", "--sensor-noise", '{"frame_drop": 2}'
    )
    assert_user_error(result, "--sensor-noise:", "frame_drop must be a probability in [0, 1]")
    result = factory(tmp_path, "train-eval", tmp_path, "--spec", "x.yaml", "--sensor-noise", "{x")
    assert_user_error(result, "--sensor-noise:", "not JSON")
