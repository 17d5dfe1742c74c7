"""The one output rule (factory/outputs.py, docs/outputs.md), through the real CLI on real
files:
never inside a dataset, never over a file without --force, never two outputs on one path, never
an input, a URL refused in one line where the store is not supported. Each refusal: one
`error:` line naming the path and the flag, exit 2, nothing written, nothing lost.

Every command is refused before it builds an env or starts Ray, so nothing here is `sim`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from demofactory.cli.main import main

from tests.build.test_preview import make_dataset
from tests.conftest import SPECS
from tests.shards.test_exports import make_dataset as make_exportable

LIFT = SPECS / "lift.yaml"


def _digest(root: Path) -> dict[str, str]:
    """Every file under `root`, by relative path: its sha256 (the dataset as it was)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def refused(capsys, *args, fragments=()) -> str:
    """Run the CLI; assert exit 2 and one `error:` line holding every fragment; the line."""
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and code == 2, (code, out, err)
    (line,) = err.splitlines()
    assert line.startswith("error: "), line
    for fragment in fragments:
        assert str(fragment) in line, f"{fragment!r} not in {line!r}"
    return line


@pytest.fixture
def dataset(tmp_path) -> Path:
    return make_dataset(tmp_path / "ds")


# --- never inside a dataset's files ------------------------------------------------------------


def _into_dataset(ds: Path) -> list[tuple[str, list]]:
    """(what, argv) writing into the dataset's own files, one per output flag."""
    manifest, shard = ds / "manifest.json", ds / "shards" / "shard-000000.tar"
    return [
        ("train-eval --save-policy", ["train-eval", ds, "--spec", LIFT, "--save-policy", manifest]),
        ("train-eval --out", ["train-eval", ds, "--spec", LIFT, "--out", shard]),
        ("train-eval --out --force", ["train-eval", ds, "--spec", LIFT, "--out", shard, "--force"]),
        ("export lerobot into it", ["export", ds, "--to", "lerobot", ds / "lerobot"]),
        ("export gr00t onto it", ["export", ds, "--to", "gr00t", ds, "--force"]),
        ("export robomimic", ["export", ds, "--to", "robomimic", ds / "shards" / "x.hdf5"]),
        ("inspect --plot", ["inspect", ds, "--plot", ds / "adr.png"]),
        ("preview --out shards", ["preview", ds, "--out", ds / "shards"]),
        ("seeds --out inside", ["seeds", LIFT, "--out", ds / "shards" / "seeds"]),
        ("script --out", ["script", LIFT, "--out", ds / "episodes.jsonl", "--force"]),
        ("collect --out", ["collect", LIFT, "--out", ds / "stats.json", "--force"]),
        ("calibrate --out", ["calibrate", LIFT, "--recordings", LIFT, "--params", "kp",
                             "--out", ds / "fit.yaml"]),
        ("calibrate --report", ["calibrate", LIFT, "--recordings", LIFT, "--params", "kp",
                                "--out", ds.parent / "fit.yaml", "--report", ds / "r.html"]),
        ("validate --still", ["validate", LIFT, "--still", ds / "stills"]),
        ("annotate --plot", ["annotate", LIFT, "--plot", ds / "plots"]),
        ("run --out inside", ["run", LIFT, "--out", ds / "shards", "--no-progress"]),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(16))
def test_no_output_lands_inside_a_dataset(dataset, capsys, case):
    what, argv = _into_dataset(dataset)[case]
    before = _digest(dataset)
    line = refused(capsys, *argv, fragments=[dataset, "expected a path outside"])
    assert "is inside the dataset" in line or "is the dataset" in line, (what, line)
    assert _digest(dataset) == before, what  # nothing written, nothing replaced


def test_a_symlink_onto_a_dataset_file_is_the_dataset_file(dataset, tmp_path, capsys):
    link = tmp_path / "report.json"
    link.symlink_to(dataset / "manifest.json")
    before = _digest(dataset)
    refused(
        capsys, "train-eval", dataset, "--spec", LIFT, "--out", link, "--force",
        fragments=[link, "--out", "is inside the dataset"],
    )  # fmt: skip
    assert _digest(dataset) == before


def test_the_preview_folder_of_a_dataset_is_the_one_place_a_command_may_write(dataset, capsys):
    capsys.readouterr()
    assert main(["preview", str(dataset)]) == 0
    assert main(["preview", str(dataset)]) == 0  # DATASET/preview is refilled, no --force
    assert (dataset / "preview" / "contact_sheet.png").is_file()


# --- never over an existing file without --force -----------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["train-eval", "DS", "--spec", LIFT, "--out", "OLD"],
        ["train-eval", "DS", "--spec", LIFT, "--save-policy", "OLD"],
        ["export", "DS", "--to", "robomimic", "OLD"],
        ["inspect", "DS", "--plot", "OLD"],
        ["script", LIFT, "--out", "OLD"],
        ["collect", LIFT, "--out", "OLD"],
        ["calibrate", LIFT, "--recordings", LIFT, "--params", "kp", "--out", "OLD"],
    ],
    ids=["train-eval-out", "save-policy", "export", "inspect-plot", "script", "collect", "calib"],
)
def test_an_existing_file_is_kept_without_force(dataset, tmp_path, capsys, argv):
    old = tmp_path / "old.bin"
    old.write_bytes(b"keep me")
    argv = [dataset if a == "DS" else old if a == "OLD" else a for a in argv]
    refused(capsys, *argv, fragments=[old, "already exists", "--force"])
    assert old.read_bytes() == b"keep me"


def test_collect_names_the_force_it_accepts(tmp_path, capsys):
    old = tmp_path / "demo.hdf5"
    old.write_bytes(b"x")
    line = refused(capsys, "collect", LIFT, "--out", old, fragments=["--force"])
    # --force passes the output check: what stops it now is the next step (no display here,
    # or the spec's own checks), never the flag
    capsys.readouterr()
    code = main(["collect", str(LIFT), "--out", str(old), "--force"])
    err = capsys.readouterr().err
    assert code == 2 and "already exists" not in err and "unrecognized" not in err, (line, err)
    assert old.read_bytes() == b"x"


@pytest.mark.parametrize("kind", ["lerobot", "gr00t"])
def test_export_into_a_non_empty_folder_needs_force(dataset, tmp_path, capsys, kind):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    refused(capsys, "export", dataset, "--to", kind, out, fragments=[out, "not empty", "--force"])
    assert (out / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("kind", ["robomimic", "lerobot"])
def test_export_force_replaces_the_old_export_once_whole(tmp_path, capsys, kind):
    data = tmp_path / "ds"
    make_exportable(data)
    out = tmp_path / ("demo.hdf5" if kind == "robomimic" else "demo")
    if kind == "robomimic":
        out.write_bytes(b"old export")
    else:
        (out / "meta").mkdir(parents=True)
        (out / "meta" / "info.json").write_text("{}")  # an earlier export
        (out / "old.txt").write_text("old export")
    capsys.readouterr()
    assert main(["export", str(data), "--to", kind, str(out), "--force"]) == 0
    summary = capsys.readouterr().out
    assert str(out) in summary and ".new-" not in summary
    if kind == "robomimic":
        assert out.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"  # an hdf5 file now
    else:
        assert (out / "meta" / "info.json").is_file() and not (out / "old.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, "ds"])  # no temp


# --- never two outputs on one path, never an input ---------------------------------------------


def test_calibrate_out_and_report_on_one_path(tmp_path, capsys):
    same = tmp_path / "fit.yaml"
    refused(
        capsys, "calibrate", LIFT, "--recordings", LIFT, "--params", "kp",
        "--out", same, "--report", same, "--force",
        fragments=[same, "--report", "the same path as --out"],
    )  # fmt: skip
    assert not same.exists()


def test_train_eval_out_and_save_policy_on_one_path(dataset, tmp_path, capsys):
    same = tmp_path / "x"
    refused(
        capsys, "train-eval", dataset, "--spec", LIFT, "--out", same, "--save-policy", same,
        fragments=[same, "the same path as --out"],
    )  # fmt: skip


def _spec_pair(tmp_path: Path) -> tuple[Path, Path]:
    base = tmp_path / "base.yaml"
    base.write_text(LIFT.read_text())
    child = tmp_path / "child.yaml"
    child.write_text("extends: base.yaml\nseed: 3\n")
    return base, child


@pytest.mark.parametrize("target", ["child", "base"])
def test_calibrate_never_replaces_its_own_spec(tmp_path, capsys, target):
    base, child = _spec_pair(tmp_path)
    out = child if target == "child" else base  # base: `extends:` would become a cycle
    before = {p: p.read_bytes() for p in (base, child)}
    refused(
        capsys, "calibrate", child, "--recordings", LIFT, "--params", "kp", "--out", out, "--force",
        fragments=[out, "is an input of this command"],
    )  # fmt: skip
    assert {p: p.read_bytes() for p in (base, child)} == before


def test_a_recording_is_an_input_too(tmp_path, capsys):
    rec = tmp_path / "real.hdf5"
    rec.write_bytes(b"recording")
    refused(
        capsys, "calibrate", LIFT, "--recordings", rec, "--params", "kp",
        "--out", tmp_path / "fit.yaml", "--report", rec, "--force",
        fragments=[rec, "is an input"],
    )  # fmt: skip
    assert rec.read_bytes() == b"recording"


def test_script_never_over_its_spec(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(LIFT.read_text())
    refused(capsys, "script", spec, "--out", spec, "--force", fragments=["is an input"])
    assert spec.read_text() == LIFT.read_text()


# --- a URL: accepted where the store is, refused in one line elsewhere --------------------------


URL_OUTPUTS = {
    "seeds": ["seeds", LIFT, "--out", "URL"],
    "export-robomimic": ["export", "DS", "--to", "robomimic", "URL.hdf5"],
    "export-lerobot": ["export", "DS", "--to", "lerobot", "URL"],
    "export-gr00t": ["export", "DS", "--to", "gr00t", "URL"],
    "script": ["script", LIFT, "--out", "URL.hdf5"],
    "collect": ["collect", LIFT, "--out", "URL.hdf5"],
    "calibrate": ["calibrate", LIFT, "--recordings", LIFT, "--params", "kp", "--out", "URL.yaml"],
    "train-eval": ["train-eval", "DS", "--spec", LIFT, "--save-policy", "URL.pt"],
    "inspect-plot": ["inspect", "DS", "--plot", "URL.png"],
    "preview": ["preview", "DS", "--out", "URL"],
    "validate-still": ["validate", LIFT, "--still", "URL"],
    "annotate-plot": ["annotate", LIFT, "--plot", "URL"],
}


@pytest.mark.parametrize("name", sorted(URL_OUTPUTS))
@pytest.mark.parametrize("url", ["s3://bkt/x", "gs://bkt//deep/x"])
def test_a_url_output_is_refused_in_one_line_naming_it(
    dataset, tmp_path, monkeypatch, capsys, name, url
):
    monkeypatch.chdir(tmp_path)
    argv = [
        dataset if a == "DS" else a.replace("URL", url) if isinstance(a, str) else a
        for a in URL_OUTPUTS[name]
    ]
    shown = next(a for a in argv if isinstance(a, str) and a.startswith(url.split(":")[0]))
    normal = shown.replace("//deep", "/deep")  # normalized once, at the command line
    line = refused(capsys, *argv, fragments=[normal, "writes local files only"])
    assert ":/bkt" not in line.replace("://bkt", "")  # never pathlib's `s3:/bkt/x`
    assert sorted(os.listdir(tmp_path)) == ["ds"]  # no `s3:` folder made in the cwd


def test_divergence_of_a_url_is_one_line_naming_it(tmp_path, capsys):
    refused(capsys, "divergence", "s3://bkt/lo", fragments=["s3://bkt/lo", "local dataset"])


@pytest.mark.parametrize("url", ["s3://bkt/../x", "s3:///nobucket", "s3://bkt/x?versionId=1"])
def test_a_malformed_dataset_url_is_one_line(tmp_path, monkeypatch, capsys, url):
    monkeypatch.chdir(tmp_path)
    refused(capsys, "inspect", url, fragments=[url])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("url", ["s3://bkt/../x", "s3:///nobucket"])
def test_a_malformed_run_out_url_is_one_line(tmp_path, monkeypatch, capsys, url):
    monkeypatch.chdir(tmp_path)
    refused(capsys, "run", LIFT, "--out", url, "--no-progress", fragments=[url])
    assert os.listdir(tmp_path) == []


def test_a_url_in_output_dir_is_normalized_like_out(tmp_path):
    from demofactory.specs.spec import load_spec

    from tests.conftest import write_spec

    spec = write_spec(tmp_path / "s.yaml", output={"dir": "S3://bkt//a/./b/"})
    assert load_spec(spec).output_dir() == "s3://bkt/a/b"


def test_export_force_never_replaces_a_folder_holding_the_dataset(tmp_path, capsys):
    data = tmp_path / "work" / "ds"
    make_exportable(data)
    before = _digest(data)
    refused(
        capsys, "export", data, "--to", "lerobot", tmp_path / "work", "--force",
        fragments=[tmp_path / "work", "holds an input"],
    )  # fmt: skip
    assert _digest(data) == before


def test_export_force_replaces_only_an_earlier_export(dataset, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    refused(
        capsys, "export", dataset, "--to", "gr00t", mine, "--force",
        fragments=[mine, "not an earlier LeRobot/GR00T export"],
    )  # fmt: skip
    assert (mine / "thesis.tex").read_text() == "years of work"
