"""The CLI under a hostile but realistic user (issue 19): nothing lost, nothing hangs, nothing
corrupt gets through.

Every case drives the real `factory` command on real files, with the real lock: in a subprocess
where the process itself is under test (its exit code, stderr, signals, working directory, its own
Ray), else through `demofactory.cli.main.main` in this process on the session's Ray cluster
(`factory_here`),
which is the same code without a Python start and a Ray start per call. Bad input ends in exactly
one `error: ` line (file, field, what was expected), exit code 2, no traceback, and nothing already
written is lost. Every new bad-input report becomes a case here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from tests.cli.test_cli_errors import LIFT_DEMOS, assert_user_error, factory, snapshot, write_spec

pytestmark = pytest.mark.sim

REPO = Path(__file__).parents[2]
RUN = ("--workers", "1", "--no-progress")


def tiny(raw: dict) -> None:
    """The Lift spec cut down: 4 attempts in 2 shards, one 32x32 camera, a short horizon."""
    raw["task"]["horizon"] = 400
    raw["generation"].update(attempts=4, attempts_per_shard=2)
    raw["cameras"] = [{"name": "agentview", "width": 32, "height": 32}]


def tiny_spec(directory: Path, name: str = "spec.yaml", mutate=None) -> Path:
    def change(raw):
        tiny(raw)
        if mutate:
            mutate(raw)

    return write_spec(directory, "lift", name=name, mutate=change)


def copy_of(dataset: Path, tmp_path: Path) -> Path:
    out = tmp_path / "data"
    shutil.copytree(dataset, out)
    return out


def files(directory: Path) -> dict[str, str]:
    """`snapshot` without the lock file, whose text names the last driver."""
    return {k: v for k, v in snapshot(directory).items() if k != ".lock"}


def manifest_names(dataset: Path) -> list[str]:
    return [s["name"] for s in json.loads((dataset / "manifest.json").read_text())["shards"]]


@pytest.fixture(scope="session")
def built(tiny_lift_spec, lift_dataset) -> tuple[Path, Path]:
    """(spec, dataset): the session's tiny Lift dataset (tests/conftest.py: 4 attempts in 2 shards,
    horizon 400), shared rather than built again; tests work on copies."""
    return tiny_lift_spec, lift_dataset


@pytest.fixture
def factory_here(ray_cluster, capfd, monkeypatch):
    """`factory ARGS` run by `demofactory.cli.main.main` in this process, as a CompletedProcess."""
    from demofactory.cli.main import main

    def run(cwd: Path, *args) -> subprocess.CompletedProcess:
        argv = [str(a) for a in args]
        monkeypatch.chdir(cwd)
        capfd.readouterr()
        try:
            code = main(argv)
        except SystemExit as exit:  # argparse
            code = exit.code
        except Exception:  # a traceback in a real process: the assertions look for it
            traceback.print_exc()
            code = 1
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["factory", *argv], code, out, err)

    return run


# --- 1-4: a dataset never shrinks or changes kind without --truncate ---------------------------


def test_fewer_attempts_is_refused_then_truncates_with_the_flag(built, tmp_path, factory_here):
    spec, dataset = built
    data = copy_of(dataset, tmp_path)
    before = snapshot(data)

    line = assert_user_error(
        factory_here(tmp_path, "run", spec, "--out", data, "--attempts", "2", *RUN),
        str(data),
        "shard-000001.tar",
        "--truncate",
        "--attempts 4",
    )
    assert "drop" in line
    assert snapshot(data) == before

    result = factory_here(
        tmp_path, "run", spec, "--out", data, "--attempts", "2", "--truncate", *RUN
    )
    assert result.returncode == 0, result.stderr
    assert manifest_names(data) == ["shard-000000.tar"]
    assert sorted(p.name for p in (data / "shards").iterdir()) == [
        "shard-000000.stats.json",
        "shard-000000.tar",
    ]  # none left unlisted: the dropped shards' statistics went with them
    assert factory_here(tmp_path, "verify", data).returncode == 0


def test_fewer_attempts_from_the_spec_is_refused(built, tmp_path):
    spec, dataset = built
    data = copy_of(dataset, tmp_path)
    raw = yaml.safe_load(spec.read_text())
    raw["generation"]["attempts"] = 3
    lower = tmp_path / "lower.yaml"
    lower.write_text(yaml.safe_dump(raw, sort_keys=False))
    before = snapshot(data)
    assert_user_error(
        factory(tmp_path, "run", lower, "--out", data, *RUN), "shard-000001.tar", "--truncate"
    )
    assert snapshot(data) == before


def test_successes_on_a_finished_dataset_keeps_its_shards(built, tmp_path):
    spec, dataset = built
    data = copy_of(dataset, tmp_path)
    generation = json.loads((data / "generation.json").read_text())["shards"]
    first = generation["shard-000000.tar"]["successes"]
    if not first:
        pytest.skip("the tiny dataset's first shard holds no success")
    before = snapshot(data)
    line = assert_user_error(
        factory(tmp_path, "run", spec, "--out", data, "--successes", str(first), *RUN),
        "shard-000001.tar",
        "--truncate",
        f"--successes {first}",
    )
    assert snapshot(data) == before, line


def test_run_into_seed_demos_needs_truncate(tmp_path, factory_here):
    spec = tiny_spec(tmp_path, mutate=lambda raw: raw.update(cameras=[]))  # nothing to render: fast
    seeds = tmp_path / "seeds"
    result = factory_here(tmp_path, "seeds", spec, "--out", seeds)
    assert result.returncode == 0, result.stderr
    before = snapshot(seeds)
    assert_user_error(
        factory_here(tmp_path, "run", spec, "--out", seeds, "--attempts", "2", *RUN),
        str(seeds),
        "factory seeds",
        "--truncate",
    )
    assert snapshot(seeds) == before


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def test_the_directory_is_judged_under_the_lock(built, tmp_path):
    """A run that looked at an empty --out, then started Ray, must not overwrite the dataset
    another run wrote there meanwhile (issue 19, case 4)."""
    spec, dataset = built
    other = tiny_spec(tmp_path, "other.yaml", mutate=lambda raw: raw.update(name="other", seed=7))
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "demofactory.cli.main", "run", str(other), "--out", str(out), *RUN],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not _children(process.pid):  # Ray's processes: the first look at --out is over
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    # meanwhile, another run finished a dataset there
    shutil.copytree(dataset, out, dirs_exist_ok=True)
    before = files(out)
    stdout, stderr = process.communicate(timeout=300)
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    assert_user_error(result, str(out), "holds a different dataset")
    assert files(out) == before


# --- 5-6: nothing hangs -------------------------------------------------------------------------


def test_address_with_no_cluster_fails_within_seconds(built, tmp_path):
    spec, _ = built
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    result = factory(
        tmp_path, "run", spec, "--out", tmp_path / "out", "--address", f"127.0.0.1:{port}", *RUN
    )
    assert time.monotonic() - start < 30
    assert_user_error(result, f"--address 127.0.0.1:{port}", "ray start --head")
    assert not (tmp_path / "out").exists()


@pytest.mark.ray  # its `factory run` starts a local Ray
def test_gpus_on_a_local_cluster_without_gpu_is_refused(tmp_path):
    spec = tiny_spec(tmp_path, mutate=lambda raw: raw.update(render={"gpus_per_worker": 1}))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RAY_ADDRESS", "DEMOFACTORY_GPUS_PER_WORKER")
    }
    result = subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", "run", str(spec), "--out", "out", *RUN],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    if "no GPU" not in result.stderr:
        pytest.skip("this machine has a GPU Ray can use")
    assert_user_error(result, "gpus_per_worker", "no GPU")
    assert not (tmp_path / "out").exists()


@pytest.mark.ray  # a Ray cluster of its own
def test_gpus_on_a_remote_cluster_without_gpu_give_up_in_stated_time(tmp_path):
    from demofactory.cluster.local import LocalCluster, driver_env

    spec = tiny_spec(tmp_path, mutate=lambda raw: raw.update(render={"gpus_per_worker": 1}))
    env = {
        k: v
        for k, v in driver_env().items()
        if k not in ("RAY_ADDRESS", "DEMOFACTORY_GPUS_PER_WORKER")
    }
    with LocalCluster(cpus=(1,)) as cluster:  # a cluster of its own: nothing of this process's
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "demofactory.cli.main",
                "run",
                str(spec),
                "--out",
                "out",
                "--address",
                cluster.address,
                *RUN,
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env=env | {"DEMOFACTORY_GPU_WAIT_S": "3"},
        )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    warning, error = result.stderr.strip().splitlines()
    assert "giving up after 3 s" in warning
    assert (
        error.startswith("error: no worker could start within 3 s") and "gpus_per_worker" in error
    )


# --- 7-9: nothing corrupt gets through ----------------------------------------------------------


def _flip_action_byte(dataset: Path) -> str:
    """Flip one byte inside the first action.npy member's data; the shard's file name."""
    import tarfile

    for shard in sorted((dataset / "shards").glob("*.tar")):
        with tarfile.open(shard) as tar:
            member = next((m for m in tar if m.name.endswith("action.npy")), None)
        if member is not None:
            data = bytearray(shard.read_bytes())
            data[member.offset_data + member.size - 3] ^= 0x40  # inside the float32 values
            shard.write_bytes(bytes(data))
            return shard.name
    pytest.skip("the tiny dataset holds no episode")


@pytest.fixture(scope="module")
def corrupt(built, tmp_path_factory) -> tuple[Path, str]:
    """A copy of the tiny dataset with one flipped byte in an action; (dataset, shard name)."""
    data = copy_of(built[1], tmp_path_factory.mktemp("corrupt"))
    return data, _flip_action_byte(data)


@pytest.mark.parametrize("command", ["lerobot", "robomimic", "preview"])
def test_readers_refuse_a_damaged_shard(corrupt, tmp_path, command):
    data, shard = corrupt
    if command == "preview":
        result = factory(tmp_path, "preview", data, "--out", tmp_path / "preview")
    else:
        target = tmp_path / ("out.hdf5" if command == "robomimic" else "lerobot")
        result = factory(tmp_path, "export", data, "--to", command, target)
    assert_user_error(result, shard, "manifest.json")
    assert list(tmp_path.iterdir()) == []


def test_the_streaming_loader_refuses_a_damaged_shard(corrupt):
    from demofactory.shards import DatasetError
    from demofactory.shards.loader import make_loader

    data, shard = corrupt
    with pytest.raises(DatasetError, match=f"{shard}: sha256 does not match manifest.json"):
        list(make_loader(data, cameras=[], normalization="none"))


def test_train_eval_refuses_a_shard_with_a_corrupt_header(built, tmp_path):
    spec, dataset = built
    data = copy_of(dataset, tmp_path)
    shard = data / "shards" / manifest_names(data)[0]
    raw = bytearray(shard.read_bytes())
    raw[0:8] = b"\xff" * 8  # the first member's name
    shard.write_bytes(bytes(raw))
    result = factory(
        tmp_path, "train-eval", data, "--spec", spec, "--steps", "1", "--rollouts", "1", "--quiet"
    )
    assert_user_error(result, shard.name, "manifest.json")


def test_verify_flags_a_stray_shard(built, tmp_path):
    _, dataset = built
    data = copy_of(dataset, tmp_path)
    shutil.copy(data / "shards" / "shard-000000.tar", data / "shards" / "shard-000009.tar")
    result = factory(tmp_path, "verify", data)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"{data}/shards/shard-000009.tar: not listed in manifest.json" in result.stderr


def _demo_copy(tmp_path: Path, change) -> Path:
    path = tmp_path / "demos.hdf5"
    shutil.copy(LIFT_DEMOS, path)
    with h5py.File(path, "r+") as f:
        change(f["data/demo_3"])
    return path


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda g: g["actions"].__setitem__((5, 2), np.nan), "actions contain NaN"),
        (
            lambda g: (
                g.__delitem__("actions"),
                g.create_dataset("actions", data=np.zeros((len(g["states"]), 6))),
            ),
            "6 wide, expected 7",
        ),
        (
            lambda g: (
                g.__delitem__("states"),
                g.create_dataset("states", data=np.array([b"x"] * 3)),
            ),
            "states: expected a numeric array",
        ),
        (lambda g: (g.__delitem__("states"), g.create_group("states")), "got a group"),
    ],
    ids=["nan-actions", "action-width", "string-states", "group-states"],
)
def test_bad_seed_demos_name_file_and_demo(tmp_path, change, expected):
    demos = _demo_copy(tmp_path, change)
    write_spec(tmp_path, "lift", mutate=lambda raw: raw.update(seed_demos=[str(demos)]))
    assert_user_error(factory(tmp_path, "validate", "spec.yaml"), str(demos), "demo_3", expected)


def _placement(**ranges):
    return lambda raw: raw.update(placement={"objects": {"cube": ranges}})


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (_placement(x=[-5.0, 5.0]), "placement.objects.cube.x"),
        (
            lambda raw: raw["generation"].update(success_hold_steps=2000),
            "generation.success_hold_steps",
        ),
    ],
    ids=["off-the-table", "hold-above-horizon"],
)
def test_specs_that_cannot_succeed_are_refused(tmp_path, mutate, field):
    write_spec(tmp_path, "lift", mutate=mutate)
    assert_user_error(factory(tmp_path, "validate", "spec.yaml"), "spec.yaml", field)


def test_unsatisfiable_min_separation_is_refused(tmp_path):
    def mutate(raw):
        raw["placement"] = {"objects": {"cubeA": {"x": [-0.05, 0.05]}}, "min_separation": 3.0}

    write_spec(tmp_path, "stack", mutate=mutate)
    assert_user_error(
        factory(tmp_path, "validate", "spec.yaml"), "spec.yaml", "placement.min_separation", "3.0"
    )


# --- 10-15: one line, never a traceback ----------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (_placement(x=[float("nan"), 0.1]), "placement.objects.cube.x"),
        (_placement(y=[-0.1, float("inf")]), "placement.objects.cube.y"),
        (
            lambda raw: raw.update(placement={"min_separation": float("nan")}),
            "placement.min_separation",
        ),
        (
            lambda raw: raw.update(render={"gpus_per_worker": float("inf")}),
            "render.gpus_per_worker",
        ),
        (lambda raw: raw.update(name="x" * 300), "name"),
        (lambda raw: raw.update(name=".."), "name"),
        (lambda raw: raw.update(instructions=["lift the cube", "  "]), "instructions[1]"),
    ],
    ids=[
        "nan-x",
        "inf-y",
        "nan-separation",
        "inf-gpus",
        "long-name",
        "dots-name",
        "empty-instruction",
    ],
)
def test_bad_numbers_and_names_are_one_line(tmp_path, mutate, field):
    write_spec(tmp_path, "lift", mutate=mutate)
    assert_user_error(factory(tmp_path, "validate", "spec.yaml"), "spec.yaml", field)


@pytest.mark.parametrize(
    "mutate",
    [_placement(x=[float("nan"), 0.1]), lambda raw: raw.update(name="x" * 300)],
    ids=["nan-x", "long-name"],
)
def test_run_with_a_bad_spec_leaves_nothing_behind(tmp_path, mutate):
    # It used to crash after taking the lock, leaving .lock and shards/ that blocked the next run.
    write_spec(tmp_path, "lift", mutate=mutate)
    result = factory(tmp_path, "run", "spec.yaml", "--out", "out", "--attempts", "1", *RUN)
    assert_user_error(result, "spec.yaml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_duplicate_yaml_keys_are_refused(tmp_path):
    text = write_spec(tmp_path, "lift").read_text()
    (tmp_path / "spec.yaml").write_text(text + "seed: 3\n")
    line = text.count("\n") + 1
    assert_user_error(
        factory(tmp_path, "validate", "spec.yaml"),
        "spec.yaml",
        "duplicate key 'seed'",
        f"line {line}",
    )


def test_binary_spec_file(tmp_path):
    (tmp_path / "spec.yaml").write_bytes(bytes(range(256)) * 4)
    assert_user_error(
        factory(tmp_path, "validate", "spec.yaml"), "spec.yaml", "not a YAML text file"
    )


def test_huge_attempts_plan_lazily(tmp_path, factory_here):
    spec = tiny_spec(tmp_path, mutate=lambda raw: raw.update(cameras=[]))
    result = factory_here(
        tmp_path,
        "run",
        spec,
        "--out",
        tmp_path / "out",
        "--attempts",
        "100000000",
        "--successes",
        "1",
        *RUN,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["run", "seeds", "robomimic"])
def test_out_whose_parent_is_a_file(built, tmp_path, command):
    spec, dataset = built
    (tmp_path / "afile").write_text("mine\n")
    out = tmp_path / "afile" / "out"
    if command == "run":
        result = factory(tmp_path, "run", spec, "--out", out, *RUN)
    elif command == "seeds":
        result = factory(tmp_path, "seeds", spec, "--out", out)
    else:
        result = factory(tmp_path, "export", dataset, "--to", "robomimic", out)
    assert_user_error(result, str(out), "afile")
    assert (tmp_path / "afile").read_text() == "mine\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_out(built, tmp_path):
    spec, _ = built
    out = tmp_path / "ro"
    out.mkdir(mode=0o555)
    assert_user_error(
        factory(tmp_path, "run", spec, "--out", out, *RUN), str(out), "permission denied"
    )


def test_resume_repairs_malformed_records(
    small_lift_spec, small_lift_dataset, tmp_path, factory_here
):
    # The session's small Lift (two shards of one attempt, one camera): both are made again.
    spec, dataset = small_lift_spec, small_lift_dataset
    data = copy_of(dataset, tmp_path)
    shards = {k: v for k, v in files(data).items() if k.startswith("shards/")}
    (data / "manifest.json").write_text("")
    (data / "generation.json").write_text("{not json")
    # Both shards are made again (the manifest is gone): two workers, as the session cluster has.
    result = factory_here(tmp_path, "run", spec, "--out", data, "--workers", "2", "--no-progress")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert (
        "manifest.json: unreadable" in result.stderr
        and "generation.json: unreadable" in result.stderr
    )
    assert {
        k: v for k, v in files(data).items() if k.startswith("shards/")
    } == shards  # the same bytes again
    assert len(list(data.glob("manifest.json.corrupt-*"))) == 1  # the user's copy is kept
    assert factory_here(tmp_path, "verify", data).returncode == 0


@pytest.mark.parametrize("flag", ["--out", "--save-policy"])
def test_train_eval_output_into_a_missing_folder_fails_up_front(built, tmp_path, flag):
    spec, dataset = built
    start = time.monotonic()
    result = factory(
        tmp_path, "train-eval", dataset, "--spec", spec, flag, tmp_path / "nowhere" / "x.json"
    )
    assert_user_error(result, "nowhere", flag)
    assert time.monotonic() - start < 30  # before training


def test_sigterm_is_a_clean_interrupt(built, tmp_path):
    spec, _ = built
    out = tmp_path / "out"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "demofactory.cli.main",
            "run",
            str(spec),
            "--out",
            str(out),
            "--attempts",
            "40",
            *RUN,
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (out / ".lock").exists():  # Ray is up (and has had its say about SIGTERM)
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.1)
    time.sleep(1)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted:"), stderr


# --- 16: clear messages -------------------------------------------------------------------------


def test_verify_without_dataset_info_fails_like_inspect(built, tmp_path):
    _, dataset = built
    data = copy_of(dataset, tmp_path)
    (data / "dataset_info.json").unlink()
    assert_user_error(factory(tmp_path, "verify", data), str(data), "dataset_info.json")
    assert_user_error(factory(tmp_path, "inspect", data), str(data), "dataset_info.json")


def test_verify_reports_a_corrupt_generation_once_named(built, tmp_path, factory_here):
    _, dataset = built
    data = copy_of(dataset, tmp_path)
    (data / "generation.json").write_text("{oops")
    result = factory_here(tmp_path, "verify", data)
    assert result.returncode == 2, result.stderr
    assert f"{data}/generation.json: malformed JSON" in result.stderr
    (data / "manifest.json").write_text("[]")
    result = factory_here(tmp_path, "verify", data)
    assert f"{data}/manifest.json" in result.stderr and f"{data}/{data}" not in result.stderr, (
        result.stderr
    )
    (data / "manifest.json").write_bytes(bytes(range(256)))
    result = factory_here(tmp_path, "verify", data)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "manifest.json: not a JSON text file" in result.stderr


def test_inspect_without_generation_says_unknown(built, tmp_path, factory_here):
    _, dataset = built
    data = copy_of(dataset, tmp_path)
    (data / "generation.json").unlink()
    result = factory_here(tmp_path, "inspect", data)
    assert result.returncode == 0, result.stderr
    attempts = next(line for line in result.stdout.splitlines() if line.startswith("attempts"))
    assert "unknown" in attempts and " 0 " not in attempts
    report = factory_here(tmp_path, "inspect", data, "--json").stdout
    assert json.loads(report)["attempts"] is None


@pytest.mark.ray  # its `factory run` starts a local Ray
def test_mujoco_writes_no_log_file_into_the_working_directory(tmp_path):
    def unstable(
        demo,
    ):  # a huge first arm joint angle at the first step: MuJoCo warns when an attempt starts there
        states = demo["states"][()]
        states[0, 1] = 1e12
        demo["states"][...] = states

    demos = _demo_copy(tmp_path, lambda demo: None)
    with h5py.File(demos, "r+") as f:  # the attempts start from the first demo's first state
        unstable(f["data/demo_1"])
    spec = tiny_spec(tmp_path, mutate=lambda raw: raw.update(seed_demos=[str(demos)], cameras=[]))
    result = factory(tmp_path, "run", spec, "--out", tmp_path / "out", "--attempts", "1", *RUN)
    assert result.returncode == 0, result.stderr
    assert not list(tmp_path.rglob("MUJOCO_LOG.TXT"))
