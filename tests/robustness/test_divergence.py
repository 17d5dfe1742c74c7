"""Divergence scores (factory/robustness/divergence.py, `factory divergence`,
generation.robustness).

One tiny real Lift dataset (low-dimensional, one successful attempt under a mild `physics:`
section), made in-process by a ShardWorker, is shared by the module; each replay of its 308
steps takes about a second on a free core.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from demofactory.build.output_dir import GENERATION_FILENAME
from demofactory.build.pipeline import ShardWorker
from demofactory.build.records import ShardTask
from demofactory.build.run import DatasetRecorder, dataset_info
from demofactory.robustness.divergence import divergence_draws, score_episode
from demofactory.robustness.divergence_run import CHECK_STEPS, score_recorded
from demofactory.shards import load_episodes, save_dataset_info
from demofactory.shards.metadata import EpisodeRecord
from demofactory.simulation.physics import draw_physics, physics_rng, recorded_physics
from demofactory.specs.spec import load_spec

from tests.conftest import write_spec

MILD = {"mass": {"cube": [0.9, 1.1]}, "kp": [0.9, 1.1], "delay": [0, 1]}
EXTREME = {"mass": {"cube": [5.0, 5.0]}, "kp": [0.3, 0.3], "friction": {"gripper": [0.2, 0.2]}}


def lift_spec(directory: Path, physics=MILD, name="div_lift", **changes) -> Path:
    return write_spec(
        directory / f"{name}.yaml",
        base="lift_lowdim.yaml",
        name=name,
        task={"horizon": 400},
        generation={"attempts": 1, "attempts_per_shard": 1, **changes.pop("generation", {})},
        physics=physics,
        **changes,
    )


@pytest.fixture(scope="module")
def lift(tmp_path_factory):
    """(spec path, Resolved, short demos, the attempt, the dataset directory)."""
    from demofactory.seeds.resolve import resolve_spec

    root = tmp_path_factory.mktemp("divergence")
    path = lift_spec(root)
    resolved = resolve_spec(load_spec(path))
    short = [d for d in resolved.demos if d.demo.length < 400]  # the 1143-step demo: too slow
    worker = ShardWorker(resolved.spec, short, resolved.scene)
    attempts = []
    run_attempt = worker.run_attempt
    worker.run_attempt = lambda task, i: attempts.append(run_attempt(task, i)) or attempts[-1]
    out = root / "dataset"
    out.mkdir()
    save_dataset_info(out, dataset_info(resolved.spec, resolved.scene.state_size))
    result = worker.run_shard(ShardTask(0, (0,)), out)
    recorder = DatasetRecorder(out, {})
    recorder.record(result)
    recorder.finish(0.0)
    assert attempts[0].success, attempts[0].reason
    return path, resolved, short, attempts[0], out


def _files(dataset: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in dataset.iterdir() if p.is_file() and p.name != ".lock"}


def test_draws_come_from_the_episode_seed_in_their_own_stream(tmp_path):
    spec = load_spec(lift_spec(tmp_path)).physics
    gravity = (0.0, 0.0, -9.81)
    draws = divergence_draws(spec, 7, 3, gravity)
    assert draws == divergence_draws(spec, 7, 3, gravity)
    assert draws[:2] == divergence_draws(spec, 7, 2, gravity)  # draw i does not depend on N
    assert len({json.dumps(d.to_json()) for d in draws}) == 3
    assert draws[0] != divergence_draws(spec, 8, 1, gravity)[0]
    assert draw_physics(spec, physics_rng(7), gravity) not in draws  # apart from the attempt's


@pytest.mark.sim
def test_the_recorded_draw_replays_with_no_error_and_succeeds(lift):
    _, resolved, short, attempt, _ = lift
    provenance = json.loads(json.dumps(attempt.provenance))
    own = recorded_physics(provenance)
    hold = resolved.spec.generation.success_hold_steps
    score = score_episode(
        resolved.scene, short[0], provenance, attempt.actions, attempt.states, [own], hold
    )
    assert score["successes"] == [True] and score["success_share"] == 1.0
    assert score["eef_error_m"] == {"mean": 0.0, "max": 0.0}
    assert score["object_error_m"] == {"cube": {"mean": 0.0, "max": 0.0}}


@pytest.mark.sim
def test_states_a_replay_does_not_give_back_are_replaced_by_the_replay(lift):
    """A dataset made before actions were executed as stored (float32): the check fails, and
    the whole replay under the recorded draw becomes the reference."""
    _, resolved, short, attempt, _ = lift
    record = EpisodeRecord(0, "", attempt.length, "", attempt.seed, dict(attempt.provenance))
    off = attempt.states.copy()
    off[CHECK_STEPS // 2 :, 1:] += 1e-9  # as float64 actions rounded to float32 would leave
    hold = resolved.spec.generation.success_hold_steps
    physics = resolved.spec.physics
    score = score_recorded(resolved.scene, short[0], record, attempt.actions, off, physics, 1, hold)
    assert score["reference"]["exact"] is False and score["reference"]["success"] is True
    assert score["reference"]["checked_steps"] == attempt.length
    assert score["reference"]["max_state_error"] == pytest.approx(1e-9, rel=1e-3)


@pytest.mark.sim
def test_extreme_physics_lowers_the_share_and_raises_the_error(lift, tmp_path):
    _, resolved, short, attempt, _ = lift
    provenance = json.loads(json.dumps(attempt.provenance))
    hold = resolved.spec.generation.success_hold_steps
    extreme = load_spec(lift_spec(tmp_path, EXTREME, name="extreme")).physics
    draws = divergence_draws(extreme, attempt.seed, 1, resolved.scene.physics.gravity)
    score = score_episode(
        resolved.scene, short[0], provenance, attempt.actions, attempt.states, draws, hold
    )
    # a cube five times heavier, a third of the stiffness, slippery fingers: no lift
    assert score["success_share"] == 0.0 and score["successes"] == [False]
    assert score["eef_error_m"]["max"] > 0.01 and score["object_error_m"]["cube"]["max"] > 0.01


@pytest.mark.sim
@pytest.mark.slow  # a scene built and three replays: ~15 s on 2 shared cores
def test_cli_writes_the_scores_into_both_files_and_inspect_shows_them(lift, tmp_path, capsys):
    from demofactory.cli.main import main

    path, resolved, short, attempt, dataset = lift
    copy = tmp_path / "dataset"
    copy.mkdir()
    for name, data in _files(dataset).items():
        (copy / name).write_bytes(data)
    (copy / "shards").mkdir()
    for shard in (dataset / "shards").iterdir():
        (copy / "shards" / shard.name).write_bytes(shard.read_bytes())
    capsys.readouterr()
    assert (
        main(["divergence", str(copy), "--spec", str(path), "--draws", "2", "--no-progress"]) == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["scored"] == summary["trajectories"] == summary["reference_exact"] == 1
    (record,) = load_episodes(copy)
    score = record.provenance["divergence"]
    assert score["reference"] == {"exact": True, "checked_steps": CHECK_STEPS}
    generation = json.loads((copy / GENERATION_FILENAME).read_text())
    (entry,) = generation["shards"]["shard-000000.tar"]["episodes"]
    assert entry["provenance"]["divergence"] == score
    # the same score from another scene: deterministic from the episode seed
    draws = divergence_draws(resolved.spec.physics, attempt.seed, 2, resolved.scene.physics.gravity)
    again = score_episode(
        resolved.scene,
        short[0],
        record.provenance,
        attempt.actions,
        attempt.states,
        draws,
        resolved.spec.generation.success_hold_steps,
    )
    assert {k: score[k] for k in again} == again
    assert main(["inspect", str(copy), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["divergence"]
    assert shown["scored"] == 1 and shown["draws"] == [2]
    assert shown["success_share_histogram"] == {f"{score['success_share']:.2f}": 1}
    assert main(["inspect", str(copy)]) == 0
    text = capsys.readouterr().out
    rows = dict(
        re.match(r"^(\S+(?: \S+)?)\s{2,}(.*)$", line).groups() for line in text.splitlines()
    )
    assert rows["divergence"].startswith("1 episodes scored under 2 physics draws")
    assert rows[f"share {score['success_share']:.2f}"].split()[0] == "1"
    assert rows["eef error"].startswith("p10 ")


@pytest.mark.sim
def test_bad_input_is_one_line_and_writes_nothing(lift, tmp_path, capsys):
    from demofactory.cli.main import main

    path, _, _, _, dataset = lift
    before = _files(dataset)
    no_physics = lift_spec(tmp_path, None, name="no_physics")
    other_seed = lift_spec(tmp_path, name="other", seed=5)
    bad_ranges = tmp_path / "ranges.yaml"
    bad_ranges.write_text(yaml.safe_dump({"physics": {"mass": {"cube": [2.0, 1.0]}}}))
    cases = [
        (["--spec", str(no_physics)], "no physics ranges"),
        (["--spec", str(other_seed)], "seed differ"),
        (["--spec", str(path), "--ranges", str(bad_ranges)], "physics.mass.cube"),
        (["--spec", str(path), "--ranges", str(tmp_path / "none.yaml")], "cannot read"),
    ]
    for flags, expected in cases:
        capsys.readouterr()
        assert main(["divergence", str(dataset), *flags, "--no-progress"]) == 2, flags
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and expected in err, err
    assert _files(dataset) == before


@pytest.mark.sim
@pytest.mark.slow  # two shards written, one replay each
def test_robustness_rejects_fragile_successes_and_keeps_with_a_zero_share(lift, tmp_path):
    _, resolved, short, attempt, _ = lift
    kept = {}
    for share in (1.0, 0.0):
        spec = load_spec(
            lift_spec(
                tmp_path,
                EXTREME,
                name=f"robust{int(share)}",
                generation={"robustness": {"draws": 1, "min_success_share": share}},
            )
        )
        worker = ShardWorker(spec, short, resolved.scene)
        fresh = replace(attempt, provenance=json.loads(json.dumps(attempt.provenance)))
        worker.run_attempt = lambda task, i, fresh=fresh: fresh
        out = tmp_path / f"out{int(share)}"
        out.mkdir()
        kept[share] = worker.run_shard(ShardTask(0, (0,)), out)
    assert kept[1.0].successes == 0 and kept[1.0].failures == {"segment: fragile": 1}
    assert kept[1.0].episodes == ()
    (episode,) = kept[0.0].episodes
    assert kept[0.0].failures == {} and episode.provenance["divergence"]["success_share"] == 0.0
    # robustness shapes the data: in the fingerprint when set (left out when null)
    plain = load_spec(lift_spec(tmp_path, EXTREME, name="robust0")).fingerprint()
    assert spec.fingerprint() != plain


def _copy(dataset: Path, to: Path) -> Path:
    to.mkdir()
    for name, data in _files(dataset).items():
        (to / name).write_bytes(data)
    (to / "shards").mkdir()
    for shard in (dataset / "shards").iterdir():
        (to / "shards" / shard.name).write_bytes(shard.read_bytes())
    return to


@pytest.mark.sim
def test_without_spec_the_dataset_s_own_spec_is_used(lift, tmp_path, capsys, monkeypatch):
    from demofactory.cli.main import main

    path, _, _, _, dataset = lift
    given, stored = _copy(dataset, tmp_path / "given"), _copy(dataset, tmp_path / "stored")
    args = ["--draws", "2", "--no-progress"]
    capsys.readouterr()
    assert main(["divergence", str(given), "--spec", str(path), *args]) == 0
    monkeypatch.chdir(tmp_path)  # the stored spec's seed demos are absolute paths
    assert main(["divergence", str(stored), *args]) == 0
    (a,), (b,) = load_episodes(given), load_episodes(stored)
    a, b = a.provenance["divergence"], b.provenance["divergence"]
    assert a.pop("ranges") == f"{path} physics"
    assert b.pop("ranges") == f"{stored / 'dataset_info.json'} spec physics"
    assert a == b  # the same scores: the stored spec is the one the dataset was made from


HOLD = """
import sys
from pathlib import Path
from demofactory.build.run import lock_output_dir
held = lock_output_dir(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.sim
def test_a_divergence_blocked_by_a_run_says_what_holds_it(lift, tmp_path, capsys):
    import os
    import socket
    import subprocess
    import sys

    from demofactory.cli.main import main

    from tests.conftest import REPO

    path, _, _, _, dataset = lift
    copy = _copy(dataset, tmp_path / "busy")
    before = _files(copy)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(copy)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline() == "held\n"
        capsys.readouterr()
        code = main(["divergence", str(copy), "--spec", str(path), "--no-progress"])
        (line,) = capsys.readouterr().err.splitlines()
    finally:
        holder.communicate("")
    assert code == 2
    assert line == (
        f"error: {copy}: `factory run` (pid {holder.pid} on {socket.gethostname()}) is writing "
        "this dataset; `factory divergence` writes into it too: wait for that to end (or stop "
        "it), then run `factory divergence` again"
    )
    assert "--out" not in line
    assert _files(copy) == before


@pytest.mark.sim
def test_divergence_on_a_full_disk_names_the_file(lift, tmp_path):
    import os
    import resource
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO

    path, _, _, _, dataset = lift
    copy = _copy(dataset, tmp_path / "full")
    before = _files(copy)
    limit = (copy / GENERATION_FILENAME).stat().st_size + 16  # the scored file cannot fit

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write(2) fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", "divergence", str(copy), "--spec", str(path),
         "--draws", "2", "--no-progress"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=small_files,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (line,) = [e for e in result.stderr.splitlines() if e.startswith("error:")]
    assert str(copy / GENERATION_FILENAME) in line and "run the same command again" in line
    assert _files(copy) == before  # the old files, whole
