"""One error policy: every error a user can fix reaches `demofactory.cli.main.main` as one line,
exit 2.

The classes are discovered, not listed: every subclass of `demofactory.errors.USER_FACING_ERRORS`
defined in the four packages (all their modules imported). Each is raised from a patched
command; then one real CLI path per library root shows that nothing on the way converts or
swallows it.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from demofactory.cli.main import COMMANDS, main, user_message
from demofactory.errors import USER_FACING_ERRORS, UserError
from demofactory.shards.format import DatasetError

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("demofactory",)  # the libraries are its subpackages
LIBRARIES = ("generators", "shards", "cluster")


def package_of(module: str) -> str:
    """The repository folder of a module: `factory` for the orchestrator's (imported as
    `factory.*`, or `demofactory.*` once it is one namespace), else the library's."""
    parts = module.split(".")
    if parts[0] == "demofactory":
        return parts[1] if len(parts) > 1 and parts[1] in LIBRARIES else "factory"
    return parts[0]


def _import_all() -> None:
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            try:
                importlib.import_module(info.name)
            except ModuleNotFoundError as err:
                # the kernels of the optional `gpu` extra (pip install -e '.[gpu]') import warp
                # at the top; without the extra only they are left out, and they define no error
                if err.name not in GPU_EXTRA_MODULES:
                    raise


GPU_EXTRA_MODULES = ("warp", "mujoco_warp")


def _subclasses(cls: type) -> set[type]:
    found = {cls}
    for sub in cls.__subclasses__():
        found |= _subclasses(sub)
    return found


def user_facing_classes() -> list[type]:
    _import_all()
    found = set().union(*(_subclasses(root) for root in USER_FACING_ERRORS))
    ours = [c for c in found if package_of(c.__module__) in ("factory", *LIBRARIES)]
    return sorted(ours, key=lambda c: f"{c.__module__}.{c.__qualname__}")


CLASSES = user_facing_classes()


def _instance(cls: type) -> Exception:
    """An instance with a recognisable message, whatever the constructor takes."""
    params = [
        p
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self"
        and p.default is p.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if not params:  # Exception's own (*args)
        return cls(f"bad input for {cls.__name__}")
    return cls(*[f"{p.name}-of-{cls.__name__}" for p in params])


def test_the_tree_has_every_library_root_and_their_subclasses():
    names = {c.__name__ for c in CLASSES}
    assert {"UserError", "SpecError", "DatasetError", "ExportError"} <= names
    assert {"ClusterError", "GpuRenderError", "ShardWriteError", "ClusterAddressError"} <= names
    assert {"GeneratorError", "TextureBankError", "TextureModelError"} <= names
    for cls in CLASSES:  # a library's error is its own: not factory's, not a ValueError
        if package_of(cls.__module__) != "factory":
            assert not issubclass(cls, (UserError, ValueError)), cls


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_each_user_facing_error_is_one_line_exit_2(cls, monkeypatch, capsys, tmp_path):
    error = _instance(cls)

    def command(args):
        raise error

    monkeypatch.setitem(COMMANDS, "inspect", command)
    assert main(["inspect", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.splitlines() == [f"error: {error}"], err


def test_a_multi_line_message_and_a_ray_wrapped_error_still_print_one_line():
    assert user_message(DatasetError("a.json: bad\n  detail")) == "a.json: bad detail"

    class RemoteError(Exception):  # ray.exceptions.RayTaskError keeps the worker's as `cause`
        cause = UserError("spec.yaml: no texture bank")

    assert user_message(RemoteError("ray::_ShardActor.run_shard()\nTraceback ...")) == (
        "spec.yaml: no texture bank"
    )


# --- one real path per library root ------------------------------------------------------------


def _one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_a_malformed_dataset_file_is_a_dataset_error(tmp_path, capsys):
    (tmp_path / "dataset_info.json").write_text("{not json")
    assert main(["inspect", str(tmp_path)]) == 2
    assert "dataset_info.json" in _one_error_line(capsys)


def test_an_export_that_cannot_start_is_an_export_error(tmp_path, capsys):
    code = main(["export", str(tmp_path / "missing"), "--to", "lerobot", str(tmp_path / "out")])
    assert code == 2
    assert "no such dataset directory" in _one_error_line(capsys)


def test_a_texture_model_that_is_not_there_is_a_generator_error(tmp_path, capsys, monkeypatch):
    from demofactory.specs.spec import load_raw_spec

    monkeypatch.setenv("DEMOFACTORY_CACHE", "off")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    raw = load_raw_spec(REPO / "scene_specs" / "lift.yaml")
    raw["seed_demos"] = [str((REPO / "scene_specs" / p).resolve()) for p in raw["seed_demos"]]
    bank = {"model": "demofactory-test/no-such-model", "prompts": ["wood"]}
    raw["appearance"] = {"textures": {"surfaces": ["table"], "bank": bank}}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert main(["validate", str(spec)]) == 2  # refused before any env is built
    line = _one_error_line(capsys)
    assert "appearance.textures.bank.model" in line and "no-such-model" in line


@pytest.mark.sim  # `factory run` builds the env while it connects (in the subprocess)
def test_no_ray_cluster_at_the_address_is_a_cluster_error(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = subprocess.run(
        [sys.executable, "-m", "demofactory.cli.main", "run", REPO / "scene_specs" / "lift.yaml"]
        + ["--out", tmp_path / "out", "--address", f"127.0.0.1:{port}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --address 127.0.0.1:"), lines
    assert "no Ray cluster answers there" in lines[0]
