"""One real dataset through the whole factory: real demos, robosuite, Ray, tars read back with
webdataset."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import webdataset as wds
import yaml
from demofactory.build.pipeline import ShardWorker
from demofactory.build.records import plan_shards
from demofactory.seeds.resolve import resolve_spec
from demofactory.shards import load_episodes, load_manifest, load_stats, sha256_file, shards_dir
from demofactory.shards.partial_stats import QUANTILE_ERROR_OF_RANGE
from demofactory.shards.stats import sidecar_path
from demofactory.specs.spec import load_spec

pytestmark = [pytest.mark.sim, pytest.mark.ray]


def _samples(dataset):
    urls = sorted(str(p) for p in shards_dir(dataset).glob("*.tar"))
    return list(wds.WebDataset(urls, shardshuffle=False).decode("rgb8"))


@pytest.fixture(scope="module")
def samples(lift_dataset):
    return _samples(lift_dataset)


def test_every_step_has_images_state_action_instruction(lift_dataset, tiny_lift_spec, samples):
    spec = load_spec(tiny_lift_spec)
    episodes = load_episodes(lift_dataset)
    assert episodes, "the tiny Lift spec should give at least one success"
    assert len(samples) == sum(e.length for e in episodes)
    for sample in samples:
        assert "." not in sample["__key__"]
        for cam in spec.cameras:
            image = sample[f"{cam.name}.jpg"]
            assert image.shape == (cam.height, cam.width, 3) and image.dtype == np.uint8
        assert sample["action.npy"].shape == (7,) and np.all(np.abs(sample["action.npy"]) <= 1.0)
        assert sample["state.npy"].shape == (9,) and np.isfinite(sample["state.npy"]).all()
        assert sample["sim_state.npy"].shape == (32,)
        assert sample["meta.json"]["instruction"] in spec.instructions


def test_episodes_whole_and_in_order_inside_one_shard(lift_dataset, samples):
    by_episode: dict[int, list] = {}
    for s in samples:
        meta = s["meta.json"]
        by_episode.setdefault(meta["episode"], []).append((meta["step"], s["__url__"]))
    records = {e.index: e for e in load_episodes(lift_dataset)}
    assert set(by_episode) == set(records)
    for index, steps in by_episode.items():
        assert [t for t, _ in steps] == list(range(records[index].length))
        assert {url.rsplit("/", 1)[-1] for _, url in steps} == {records[index].shard}


def test_images_match_the_recorded_states_upright(lift_dataset, tiny_lift_spec, samples):
    """Re-render recorded states in a fresh scene: the stored JPEG matches it, not its flip."""
    from demofactory.simulation.render import FrameRenderer

    spec = load_spec(tiny_lift_spec)
    resolved = resolve_spec(spec)
    renderer = FrameRenderer(resolved.scene, spec.cameras, spec.render)
    for sample in samples[:: max(1, len(samples) // 5)]:
        resolved.scene.set_state(sample["sim_state.npy"])
        fresh = renderer.render_current()
        for cam in spec.cameras:
            stored = sample[f"{cam.name}.jpg"].astype(np.float64)
            err = np.abs(stored - fresh[cam.name]).mean()
            flipped = np.abs(stored - fresh[cam.name][::-1]).mean()
            assert err < 6.0 and flipped > 2 * err, (cam.name, err, flipped)
    # In agentview the bright table fills the bottom of an upright image.
    first = samples[0]["agentview.jpg"].astype(np.float64)
    assert first[-8:].mean() > first[:8].mean()
    renderer.close()


def test_manifest_checksums_and_stats_match_the_data(lift_dataset, samples):
    manifest = load_manifest(lift_dataset)
    assert len(manifest.shards) == 2  # 4 attempts, 2 per shard
    for info in manifest.shards:
        assert sha256_file(shards_dir(lift_dataset) / info.name) == info.sha256
    actions = np.stack([s["action.npy"] for s in samples])
    stats = load_stats(lift_dataset)
    assert stats.keys["action"].count == len(actions)
    np.testing.assert_allclose(stats.keys["action"].mean, actions.mean(0), rtol=1e-5, atol=1e-6)
    # q99 from the workers' merged sketches: within the stated share of each dimension's range
    bound = QUANTILE_ERROR_OF_RANGE * (actions.max(0) - actions.min(0)) + 1e-7
    error = np.abs(np.asarray(stats.keys["action"].q99) - np.quantile(actions, 0.99, axis=0))
    assert (error <= bound).all()
    for info in manifest.shards:  # each shard's statistics beside it, for that very tar
        sidecar = sidecar_path(shards_dir(lift_dataset) / info.name).read_bytes()
        assert json.loads(sidecar.partition(b"\n")[0]) == {"sha256": info.sha256}
    assert stats.extra["episodes"] == len(load_episodes(lift_dataset))


def test_inspect_json_reports_the_success_rate(lift_dataset, capsys):
    from demofactory.cli.main import main

    capsys.readouterr()
    assert main(["inspect", str(lift_dataset), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["attempts"] == 4
    assert report["success_rate"] == pytest.approx(report["successes"] / 4)
    assert report["episodes"] == len(load_episodes(lift_dataset)) == report["successes"]
    assert report["shards"] == 2 and report["steps"] > 0
    assert sum(report["failures"].values()) == 4 - report["successes"]


# The tests that make shards again work on the small Lift dataset (tests/conftest.py: two shards
# of one attempt, one camera), whose shards cost a quarter of the tiny one's to render.


@pytest.mark.slow  # a `factory run` or a shard made again: tens of seconds
def test_a_shard_rewritten_in_one_process_is_byte_identical(
    small_lift_dataset, small_lift_spec, tmp_path
):
    """Shard bytes depend on the spec and the shard index, not on the worker or worker count."""
    spec = load_spec(small_lift_spec)
    resolved = resolve_spec(spec)
    task = plan_shards(spec)[1]
    worker = ShardWorker(spec, resolved.demos, resolved.scene)
    result = worker.run_shard(task, tmp_path)
    worker.close()
    listed = load_manifest(small_lift_dataset).by_name()[task.name]
    assert result.info.sha256 == listed.sha256


def test_rerun_resumes_without_redoing_shards(lift_dataset, tiny_lift_spec, ray_cluster):
    from demofactory.cli.main import main

    before = {
        p.name: (p.stat().st_mtime_ns, sha256_file(p))
        for p in shards_dir(lift_dataset).glob("*.tar")
    }
    episodes_before = [e.index for e in load_episodes(lift_dataset)]
    assert main(["run", str(tiny_lift_spec), "--out", str(lift_dataset), "--no-progress"]) == 0
    after = {
        p.name: (p.stat().st_mtime_ns, sha256_file(p))
        for p in shards_dir(lift_dataset).glob("*.tar")
    }
    assert after == before
    assert [e.index for e in load_episodes(lift_dataset)] == episodes_before


@pytest.mark.slow  # a `factory run` or a shard made again: tens of seconds
def test_more_attempts_extend_the_dataset(
    small_lift_dataset, small_lift_spec, tmp_path, ray_cluster
):
    """Raising --attempts on the same output keeps finished shards and adds new ones."""
    from demofactory.cli.main import main

    copy = tmp_path / "extended"
    subprocess.run(["cp", "-r", str(small_lift_dataset), str(copy)], check=True)
    kept = {p.name: sha256_file(p) for p in shards_dir(copy).glob("*.tar")}
    assert (
        main(["run", str(small_lift_spec), "--out", str(copy), "--attempts", "3", "--no-progress"])
        == 0
    )
    manifest = load_manifest(copy).by_name()
    assert set(manifest) == set(kept) | {"shard-000002.tar"}
    assert all(manifest[name].sha256 == digest for name, digest in kept.items())
    data = yaml.safe_load(small_lift_spec.read_text())
    assert data["generation"]["attempts"] == 2  # the spec file itself is untouched


@pytest.mark.slow  # a `factory run` or a shard made again: tens of seconds
def test_generate_until_n_successes_stops_early_and_reports_subtasks(tmp_path, ray_cluster):
    from demofactory.build.report import summarize
    from demofactory.cli.main import main

    from tests.conftest import write_spec

    # The tiny Lift spec without cameras: stopping early is about attempts and shards, and
    # rendering (~40 ms a frame and camera under software GL) would be most of the run.
    spec = write_spec(
        tmp_path / "until.yaml",
        name="tiny_lift_lowdim",
        task={"horizon": 400},
        generation={"attempts": 4, "attempts_per_shard": 2},
        cameras=[],
    )
    out = tmp_path / "until1"
    assert main(["run", str(spec), "--out", str(out), "--successes", "1", "--no-progress"]) == 0
    report = summarize(out)
    manifest = load_manifest(out)
    # The shortest prefix of shards (by index) holding one success: whatever the worker count.
    names = [s.name for s in manifest.shards]
    assert names == [f"shard-{i:06d}.tar" for i in range(len(names))]  # a prefix by index
    per_shard = [s.episodes for s in manifest.shards]
    assert sum(per_shard) >= 1 and sum(per_shard[:-1]) < 1  # the shortest one holding 1 success
    assert sorted(p.name for p in shards_dir(out).glob("*.tar")) == [
        s.name for s in manifest.shards
    ]
    subtasks = report["subtasks"]
    assert subtasks[0]["reached"] == report["attempts"]
    assert all(row["failed"] <= row["reached"] for row in subtasks)


def test_verify_export_and_preview_commands_on_a_real_dataset(lift_dataset, tmp_path, capsys):
    import h5py
    from demofactory.cli.main import main

    assert main(["verify", str(lift_dataset)]) == 0
    assert (
        main(["export", str(lift_dataset), "--to", "robomimic", str(tmp_path / "lift.hdf5")]) == 0
    )
    with h5py.File(tmp_path / "lift.hdf5", "r") as f:
        assert len(f["data"]) == len(load_episodes(lift_dataset))
    assert main(["preview", str(lift_dataset), "--out", str(tmp_path / "preview")]) == 0
    assert (tmp_path / "preview" / "contact_sheet.png").stat().st_size > 0
    broken = tmp_path / "broken"
    subprocess.run(["cp", "-r", str(lift_dataset), str(broken)], check=True)
    shard = sorted(shards_dir(broken).glob("*.tar"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["verify", str(broken)]) == 2
    assert shard.name in capsys.readouterr().err


@pytest.mark.slow  # a `factory run` or a shard made again: tens of seconds
def test_a_damaged_shard_is_redone_on_rerun(
    small_lift_dataset, small_lift_spec, tmp_path, ray_cluster
):
    """Every shard is listed, so the driver's quick look (no checksums) starts no cluster; the
    checksums under the lock find the damage, and a cluster is started for that shard alone."""
    from demofactory.build.run import _shards_left
    from demofactory.cli.main import main

    copy = tmp_path / "damaged"
    subprocess.run(["cp", "-r", str(small_lift_dataset), str(copy)], check=True)
    listed = load_manifest(copy).by_name()
    damaged = shards_dir(copy) / "shard-000001.tar"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    untouched = shards_dir(copy) / "shard-000000.tar"
    mtime = untouched.stat().st_mtime_ns
    spec = load_spec(small_lift_spec)
    assert _shards_left(copy, spec, plan_shards(spec)) == 0  # the quick look cannot see the damage

    assert main(["run", str(small_lift_spec), "--out", str(copy), "--no-progress"]) == 0

    assert sha256_file(damaged) == listed[damaged.name].sha256  # rewritten, byte for byte
    assert untouched.stat().st_mtime_ns == mtime  # the sound shard was not redone
    assert load_manifest(copy).by_name() == listed


def test_the_quick_look_counts_unlisted_shards(lift_dataset, tiny_lift_spec, tmp_path):
    from demofactory.build.run import _shards_left

    spec = load_spec(tiny_lift_spec)
    tasks = plan_shards(spec)
    assert _shards_left(lift_dataset, spec, tasks) == 0
    more = load_spec(tiny_lift_spec, {"generation.attempts": 8})
    assert _shards_left(lift_dataset, more, plan_shards(more)) == 2  # shards 2 and 3 are new
