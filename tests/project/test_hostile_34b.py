"""Issue 34 (hangs, start-up, tracebacks, misleading messages), each case and variants of it
through the real CLI: a real subprocess where the exit code or a signal is the point, a real
HTTP server and a silent listener for --address, RLIMIT_FSIZE for a full disk.

Every case here is refused before an env is built or Ray starts, so none is `sim` or `ray`.
"""

from __future__ import annotations

import http.server
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from demofactory.cli.main import main
from demofactory.specs.spec import load_raw_spec

from tests.build.test_preview import make_dataset
from tests.conftest import REPO, SPECS, write_spec


def _factory(*args, cwd: Path = REPO, env: dict | None = None, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        timeout=120,  # only keeps a hang from hanging the suite
        **kwargs,
    )


def _one_line(result, *fragments) -> str:
    output = result.stdout + result.stderr
    assert "Traceback" not in output and result.returncode == 2, output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and result.stdout == "", output
    for fragment in fragments:
        assert str(fragment) in line, f"{fragment!r} not in {line!r}"
    return line


def _refused(capsys, *args, fragments=()) -> str:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err, (code, out, err)
    (line,) = err.splitlines()
    for fragment in fragments:
        assert str(fragment) in line, f"{fragment!r} not in {line!r}"
    return line


# --- tracebacks: ranges numpy cannot draw, nesting the parser cannot follow ---------------------


@pytest.mark.parametrize(
    "axis, bounds",
    [("yaw", [-1e308, 1.7e308]), ("x", [-1.5e308, 1e308]), ("y", [-1e308, 1e308])],
)
def test_a_placement_range_too_wide_to_draw_is_one_line(tmp_path, capsys, axis, bounds):
    placement = {"objects": {"cube": {"x": [0, 0], "y": [0, 0], "yaw": [0, 0], axis: bounds}}}
    spec = write_spec(tmp_path / "wide.yaml", placement=placement)
    _refused(capsys, "validate", spec, fragments=[spec, "placement.objects.cube", axis, "wider"])


def test_a_physics_range_too_wide_to_draw_is_one_line(tmp_path, capsys):
    spec = write_spec(tmp_path / "wide.yaml", physics={"joint_damping": {"arm": [0, 1.7e308]}})
    # [0, 1.7e308] is a width a float holds: the check is on the width, not the size
    capsys.readouterr()
    spec = write_spec(tmp_path / "wider.yaml", physics={"kp": [-1.7e308, 1.7e308]})
    _refused(capsys, "validate", spec, fragments=[spec, "physics.kp"])


def test_a_delay_range_past_a_c_long_is_one_line(tmp_path, capsys):
    spec = write_spec(tmp_path / "late.yaml", physics={"delay": [0, 10**30]})
    _refused(capsys, "validate", spec, fragments=[spec, "physics.delay", "at most"])


def test_a_scene_placement_too_wide_to_draw_is_one_line(tmp_path, capsys):
    raw = load_raw_spec(SPECS / "cube_bowl.yaml")
    raw["scene"]["objects"]["cube"]["placement"]["yaw"] = [-1e308, 1.7e308]
    spec = tmp_path / "wide_scene.yaml"
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))
    _refused(capsys, "validate", spec, fragments=[spec, "scene", "yaw", "wider"])


@pytest.mark.parametrize("field", ["task.success", "subtasks"])
@pytest.mark.parametrize("combinator", ["not", "and"])
def test_a_predicate_nested_5000_deep_is_one_line(tmp_path, capsys, field, combinator):
    inner = "lifted(cube)"
    for _ in range(5000):
        inner = f"{combinator}({inner})" if combinator == "not" else f"and({inner}, grasped(cube))"
    if field == "task.success":
        raw = load_raw_spec(SPECS / "lift.yaml")
        spec = write_spec(tmp_path / "deep.yaml", task={**raw["task"], "success": inner})
    else:
        spec = write_spec(
            tmp_path / "deep.yaml",
            subtasks=[{"object": "cube", "ends_when": inner}, {"object": "cube"}],
        )
    line = _refused(capsys, "validate", spec, fragments=[spec, "nested 5", "at most 32"])
    assert field.split(".")[0] in line


def test_a_predicate_32_deep_still_parses(tmp_path, capsys):
    from demofactory.generators.predicates import parse_predicate

    text = "not(" * 31 + "lifted(cube)" + ")" * 31
    assert parse_predicate(text).name == "not"


def test_yaml_nested_too_deep_is_one_line(tmp_path, capsys):
    spec = tmp_path / "deep.yaml"
    spec.write_text("name: x\nnotes: " + "[" * 6000 + "]" * 6000 + "\n")
    _refused(capsys, "validate", spec, fragments=[spec, "nested too deep"])


# --- misleading: the spec's own values under a flag; an arena camera name -----------------------


@pytest.mark.parametrize(
    "field, value, argv",
    [
        ("generation", {"attempts": -5}, ["--attempts", "3"]),
        ("generation", {"target_successes": 0}, ["--successes", "2"]),
        ("seed", -3, ["--seed", "4"]),
    ],
)
def test_the_specs_own_bad_value_is_refused_even_when_a_flag_overrides_it(
    tmp_path, capsys, field, value, argv
):
    spec = write_spec(tmp_path / "own.yaml", **{field: value})
    out = tmp_path / "out"
    line = _refused(capsys, "run", spec, *argv, "--out", out, "--no-progress", fragments=[spec])
    assert field in line
    assert not out.exists()


@pytest.mark.parametrize("name", ["agentview", "frontview", "birdview", "sideview"])
def test_a_scene_camera_named_like_the_arenas_is_one_line(tmp_path, capsys, name):
    raw = load_raw_spec(SPECS / "cube_bowl.yaml")
    raw["scene"]["cameras"][0]["name"] = name
    raw["cameras"][0]["name"] = name
    spec = tmp_path / "cam.yaml"
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))
    _refused(capsys, "validate", spec, fragments=[spec, "scene.cameras", repr(name), "frontcam"])


def test_the_arena_camera_list_is_robosuites():
    from demofactory.specs.scene import ARENA_CAMERAS
    from robosuite.models.arenas import TableArena

    cameras = {c.get("name") for c in TableArena().worldbody.iter("camera")}
    assert set(ARENA_CAMERAS) == cameras


# --- collect without a display ------------------------------------------------------------------


@pytest.mark.parametrize("display", [None, ":77"])
def test_collect_without_a_display_is_one_line(tmp_path, display):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    if display:
        env["DISPLAY"] = display  # a display nobody serves
    out = tmp_path / "demo.hdf5"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "demofactory.cli.main",
            "collect",
            SPECS / "lift.yaml",
            "--out",
            out,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    _one_line(result, "cannot open robosuite's viewer", "factory script")
    assert not out.exists()


# --- --address: a live port that is not Ray -----------------------------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def http_port():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_port():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # the kernel accepts; nothing ever answers
    yield listener.getsockname()[1]
    listener.close()


@pytest.mark.parametrize("kind", ["http", "silent"])
def test_an_address_that_is_not_ray_is_one_line_in_seconds(request, tiny_lift_spec, tmp_path, kind):
    port = request.getfixturevalue(f"{kind}_port")
    out = tmp_path / "out"
    # The subprocess's timeout is the promise: before, both retried for minutes.
    result = _factory(
        "run", tiny_lift_spec, "--out", out, "--address", f"127.0.0.1:{port}", "--no-progress"
    )
    _one_line(result, f"--address 127.0.0.1:{port}", "not a Ray cluster")


def test_ray_address_from_the_environment_too(tiny_lift_spec, tmp_path, http_port):
    result = _factory(
        "run", tiny_lift_spec, "--out", tmp_path / "out", "--no-progress",
        env={"RAY_ADDRESS": f"127.0.0.1:{http_port}"},
    )  # fmt: skip
    _one_line(result, "$RAY_ADDRESS", "not a Ray cluster")


# --- SIGTERM: 143, and a line that says what this command keeps --------------------------------


SIGTERM_CASES = {  # verb: (argv; DS the dataset, SPEC the spec, OUT an output), what it says
    "export-robomimic": (["export", "DS", "--to", "robomimic", "OUT.hdf5"], "OUT was not written"),
    "export-lerobot": (["export", "DS", "--to", "lerobot", "OUT"], "OUT was not written"),
    "preview": (["preview", "DS", "--out", "OUT"], "the dataset is unchanged"),
    "verify": (["verify", "DS"], "nothing was written"),
    "train-eval": (["train-eval", "DS", "--spec", "SPEC", "--out", "OUT"], "--out and --save"),
    "script": (["script", "SPEC", "--out", "OUT.hdf5"], "--out was not written"),
    "divergence": (["divergence", "DS", "--spec", "SPEC"], "the dataset is unchanged"),
    "run": (["run", "SPEC", "--out", "OUT", "--no-progress"], "run the same command again"),
    "seeds": (["seeds", "SPEC", "--out", "OUT"], "run the same command again"),
    "calibrate": (
        ["calibrate", "SPEC", "--recordings", "SPEC", "--params", "kp", "--out", "OUT.yaml"],
        "--out and --report were not written",
    ),
}


@pytest.mark.parametrize("case", sorted(SIGTERM_CASES))
def test_sigterm_exits_143_saying_what_the_command_keeps(tmp_path, case):
    argv, says = SIGTERM_CASES[case]
    data = make_dataset(tmp_path / "ds")
    spec = tmp_path / "spec.yaml"
    # A FIFO stands in for a slow disk: the command blocks reading it, a real process in a
    # real read(2), while SIGTERM arrives. The spec, for the commands that read it first.
    blocking = spec if "SPEC" in argv else data / "dataset_info.json"
    if blocking != spec:
        blocking.unlink()
    os.mkfifo(blocking)
    out = str(tmp_path / "out")
    argv = [a.replace("DS", str(data)).replace("SPEC", str(spec)).replace("OUT", out) for a in argv]
    process = subprocess.Popen(
        [sys.executable, "-m", "demofactory.cli.main", *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    writer = None
    try:
        writer = _wait_until_reading(process.pid, blocking)
        time.sleep(0.5)  # into read(2)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
        if writer is not None:
            os.close(writer)
    assert process.returncode == 143, err
    assert err.splitlines()[-1].startswith("interrupted: ") and says in err, err
    if case != "run":
        assert "run the same command again to resume" not in err  # only `run` resumes
    assert "Traceback" not in err
    assert not any(p.name.startswith(("out", ".out")) for p in tmp_path.iterdir())


def _wait_until_reading(pid: int, fifo: Path, timeout_s: float = 60) -> int:
    """Open `fifo` for writing: that returns once process `pid` opened it to read (and then
    blocks reading it, as on a stalled disk). The write end, to close after the test."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:  # non-blocking: ENXIO while no reader has it open
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                break  # it ended without reading
            time.sleep(0.1)
    raise AssertionError(f"pid {pid} never opened {fifo}")


# --- a full disk: RLIMIT_FSIZE stands in for it ------------------------------------------------


def _small_files(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write(2) then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize(
    "frames, limit, named",
    [(5, 4096, "contact_sheet.png"), (1200, 20000, ".mp4")],  # the sheet, then a video
    ids=["contact-sheet", "video"],
)
def test_preview_on_a_full_disk_is_one_line_naming_the_file(tmp_path, frames, limit, named):
    data = make_dataset(tmp_path / "ds", episodes=((3, 0, frames),))
    out = tmp_path / "pictures"
    result = _factory("preview", data, "--out", out, preexec_fn=_small_files(limit))
    line = _one_line(result, str(out), named)
    assert "Broken pipe" not in line and "FFMPEG" not in result.stderr
    kept = sorted(p.name for p in out.iterdir())
    assert all(not n.endswith(".mp4") and not n.startswith(".") for n in kept), kept  # no half


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process below `pid` (from /proc)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        commands[int(entry)] = cmd
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent:
                found.append((child, commands[child]))
                frontier.append(child)
    return found


@pytest.mark.ray  # the subprocess starts a local Ray cluster
def test_sigterm_while_ray_starts_exits_143(tiny_lift_spec, tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "demofactory.cli.main", "run", str(tiny_lift_spec), "--out",
         str(tmp_path / "out"), "--workers", "1", "--no-progress"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if any("gcs_server" in cmd for _, cmd in _descendants(process.pid)):
                break  # ray.init under way: its GCS is up, the node not yet
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, err
    assert err.splitlines()[-1].startswith("interrupted: finished shards are kept"), err
    assert "Traceback" not in err
