"""`demofactory.build.preview` on tiny real datasets: shards written with the writer, frames whose
colour says
which episode, step and camera they are, read back from the PNG and the mp4s."""

from __future__ import annotations

import io
import json
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest
from demofactory.build.preview import (
    Camera,
    camera_carrier,
    make_sheet_layout,
    preview,
    sheet_steps,
    write_contact_sheet,
    write_episode_videos,
)
from demofactory.errors import USER_FACING_ERRORS, UserError
from demofactory.shards import (
    Episode,
    EpisodeRecord,
    Manifest,
    save_dataset_info,
    save_episodes,
    save_manifest,
    shards_dir,
    write_shard,
)
from PIL import Image

FPS = 10
# Listed in dataset_info.json in this order, which is not the tar's (alphabetical) order.
CAMERAS = {"scene": (48, 48), "hand": (40, 32)}  # name -> (width, height)
# (index, shard, length): gaps in the indices, two shards, three lengths.
EPISODES = ((3, 0, 5), (7, 0, 8), (12, 1, 3))
# The sheet's first, middle (length // 2) and last step of each episode, worked out by hand.
SHEET_STEPS = {3: (0, 2, 4), 7: (0, 4, 7), 12: (0, 1, 2)}
BLUE = {"scene": 40, "hand": 200, "odd": 120}
BLUE.update({"agentview": 60, "robot0_eye_in_hand": 160, "robot1_eye_in_hand": 230})


def colour(index: int, step: int, camera: str) -> tuple[int, int, int]:
    """The solid colour of a frame: red says the episode, green the step, blue the camera."""
    return (20 * index) % 256, 15 + 25 * step, BLUE[camera]


def _jpeg(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), rgb).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def make_dataset(root: Path, cameras=CAMERAS, episodes=EPISODES) -> Path:
    """A real dataset: shards, episodes.jsonl, dataset_info.json and manifest.json (preview
    checks shards against it)."""
    shards_dir(root).mkdir(parents=True)
    by_shard: dict[int, list[Episode]] = {}
    for index, shard, length in episodes:
        images = {
            name: [_jpeg(w, h, colour(index, t, name)) for t in range(length)]
            for name, (w, h) in cameras.items()
        }
        by_shard.setdefault(shard, []).append(
            Episode(
                index=index,
                shard=shard,
                instruction=f"stack the red cube on the green cube ({index})",
                seed=index,
                actions=np.zeros((length, 7)),
                states=np.zeros((length, 9)),
                sim_states=np.zeros((length, 5)),
                images=images,
                provenance={},
            )
        )
    manifest = Manifest(
        tuple(write_shard(eps, shards_dir(root), shard) for shard, eps in by_shard.items())
    )
    save_manifest(root, manifest)
    save_episodes(root, [EpisodeRecord.from_episode(ep) for eps in by_shard.values() for ep in eps])
    cams = [{"name": n, "width": w, "height": h, "format": "jpg"} for n, (w, h) in cameras.items()]
    save_dataset_info(root, {"name": "tiny", "fps": FPS, "cameras": cams})
    return root


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("preview") / "tiny")


def _close(pixel, expected, tolerance: int) -> bool:
    return all(abs(int(p) - e) <= tolerance for p, e in zip(pixel, expected, strict=True))


def test_display_size_scales_short_side_into_range():
    assert Camera("a", 48, 48).display_size == (144, 144)
    assert Camera("a", 40, 32).display_size == (160, 128)
    assert Camera("a", 84, 84).display_size == (168, 168)
    assert Camera("a", 200, 150).display_size == (200, 150)
    assert Camera("a", 640, 480).display_size == (320, 240)
    assert sheet_steps(8) == (0, 4, 7)
    assert sheet_steps(1) == (0, 0, 0)


@pytest.mark.parametrize("episodes, rows", [(6, (3, 7, 12)), (2, (3, 7))])
def test_contact_sheet_shows_first_middle_last_of_each_episode(dataset, tmp_path, episodes, rows):
    out = write_contact_sheet(dataset, tmp_path / "sub" / "sheet.png", episodes=episodes)
    assert out == tmp_path / "sub" / "sheet.png"
    sheet = np.asarray(Image.open(out).convert("RGB"))

    cameras = [Camera(name, w, h) for name, (w, h) in CAMERAS.items()]
    layout = make_sheet_layout(cameras, rows=len(rows))
    assert (sheet.shape[1], sheet.shape[0]) == (layout.width, layout.height)
    for row, index in enumerate(rows):
        for c, camera in enumerate(cameras):
            for column, step in enumerate(SHEET_STEPS[index]):
                x0, y0, x1, y1 = layout.cell_box(row, c, column)
                assert (x1 - x0, y1 - y0) == camera.display_size
                assert 0 <= x0 and x1 <= layout.width and 0 <= y0 and y1 <= layout.height
                # The whole cell is the frame: centre and corners, 1 px in.
                for x, y in [((x0 + x1) // 2, (y0 + y1) // 2), (x0 + 1, y0 + 1), (x1 - 2, y1 - 2)]:
                    pixel = sheet[y, x]
                    assert _close(pixel, colour(index, step, camera.name), 8), (
                        index,
                        camera.name,
                        step,
                        pixel,
                    )
    # Columns follow dataset_info.json; rows go down; nothing overlaps.
    assert layout.cell_box(0, 0, 2)[2] < layout.cell_box(0, 1, 0)[0]
    assert layout.cell_box(0, 0, 0)[3] < layout.cell_box(1, 0, 0)[1]


def _read_video(path: Path) -> tuple[list[np.ndarray], float]:
    with imageio.get_reader(path, format="FFMPEG") as reader:
        return list(reader.iter_data()), reader.get_meta_data()["fps"]


@pytest.mark.parametrize("episode, length", [(None, 5), (12, 3)])
def test_episode_videos_have_every_frame_at_dataset_fps(dataset, tmp_path, episode, length):
    index = 3 if episode is None else episode
    paths = write_episode_videos(dataset, tmp_path, episode=episode)
    assert paths == [tmp_path / f"e{index:08d}_{name}.mp4" for name in CAMERAS]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in paths
    )  # no temporaries
    for path, (name, (w, h)) in zip(paths, CAMERAS.items(), strict=True):
        frames, fps = _read_video(path)
        assert len(frames) == length and fps == FPS
        width, height = Camera(name, w, h).display_size
        assert all(frame.shape == (height, width, 3) for frame in frames)
        for step in (0, length - 1):
            assert _close(frames[step][height // 2, width // 2], colour(index, step, name), 12)


def test_odd_frame_sizes_are_padded_to_even(tmp_path):
    data = make_dataset(tmp_path / "odd", cameras={"odd": (131, 129)}, episodes=((0, 0, 2),))
    (path,) = write_episode_videos(data, tmp_path / "videos")
    frames, _ = _read_video(path)
    assert len(frames) == 2 and frames[0].shape == (130, 132, 3)


def test_preview_writes_into_dataset_preview_dir(tmp_path):
    data = make_dataset(tmp_path / "tiny")
    result = preview(data, episodes=1)
    assert result["contact_sheet"] == data / "preview" / "contact_sheet.png"
    assert result["videos"] == [data / "preview" / f"e00000003_{name}.mp4" for name in CAMERAS]
    assert (
        Image.open(result["contact_sheet"]).height
        == make_sheet_layout([Camera(n, w, h) for n, (w, h) in CAMERAS.items()], rows=1).height
    )


def test_dataset_without_cameras_is_refused(tmp_path):
    data = make_dataset(tmp_path / "lowdim", cameras={})
    with pytest.raises(UserError, match="no cameras"):
        preview(data)
    assert not (data / "preview").exists()


def _drop_shard(data: Path) -> None:
    (shards_dir(data) / "shard-000001.tar").unlink()


def _corrupt_episodes(data: Path) -> None:
    (data / "episodes.jsonl").write_text("{not json\n")


def _drop_info(data: Path) -> None:
    (data / "dataset_info.json").unlink()


@pytest.mark.parametrize(
    "damage, call, message",
    [
        (_drop_info, lambda d, out: preview(d, out), "not a demofactory dataset"),
        (_corrupt_episodes, lambda d, out: preview(d, out), "not a readable dataset"),
        (
            _drop_shard,
            lambda d, out: write_episode_videos(d, out, episode=12),
            "missing, yet listed in manifest.json",
        ),
        (
            None,
            lambda d, out: write_episode_videos(d, out, episode=99),
            r"no episode 99 .* 3, 7, 12",
        ),
        (
            None,
            lambda d, out: write_contact_sheet(d, out / "s.png", episodes=0),
            "episodes must be >= 1",
        ),
    ],
)
def test_bad_datasets_raise_user_error(tmp_path, damage, call, message):
    data = make_dataset(tmp_path / "tiny", episodes=EPISODES)
    if damage is not None:
        damage(data)
    with pytest.raises(USER_FACING_ERRORS, match=message):
        call(data, tmp_path / "out")


def test_missing_dataset_raises_user_error(tmp_path):
    with pytest.raises(UserError, match="no such dataset directory"):
        preview(tmp_path / "nowhere")
    with pytest.raises(UserError, match="no such dataset directory"):
        write_contact_sheet(tmp_path / "nowhere", tmp_path / "s.png")


# --- two arms: wrist cameras labelled by the arm that carries them ---------------------------

TWO_ARM_CAMERAS = {
    "agentview": (32, 32),
    "robot0_eye_in_hand": (32, 32),
    "robot1_eye_in_hand": (32, 32),
}
# dataset_info.json's embodiment of a two-arm dataset (demofactory.build.run): robot 0 first
PAIR = {"Panda": {"arms": ["right", "left"], "env_configuration": "parallel"}}


def _mount(robot: int, arm: str, wrist: bool = True) -> dict:
    return {"robot": robot, "arm": arm, "wrist": wrist}


@pytest.mark.parametrize(
    "entry, embodiments, carrier",
    [
        ({"name": "robot0_eye_in_hand", "mount": _mount(0, "right")}, PAIR, "right wrist"),
        ({"name": "robot1_eye_in_hand", "mount": _mount(1, "left")}, PAIR, "left wrist"),
        ({"name": "robot1_robotview", "mount": _mount(1, "left", False)}, PAIR, "left arm"),
        # the metadata, not the name, says which arm (a mount naming another arm wins)
        ({"name": "robot0_eye_in_hand", "mount": _mount(0, "left")}, PAIR, "left wrist"),
        ({"name": "agentview"}, PAIR, ""),
        # written before cameras had a mount: the embodiment's arms, by robosuite's robot index
        ({"name": "robot1_eye_in_hand"}, PAIR, "left wrist"),
        ({"name": "robot0_robotview"}, PAIR, ""),
        ({"name": "robot2_eye_in_hand"}, PAIR, ""),
        # one arm: robosuite's names as they are
        ({"name": "robot0_eye_in_hand"}, {"Panda": {}}, ""),
        ({"name": "robot0_eye_in_hand"}, None, ""),
    ],
)
def test_camera_carrier_comes_from_the_dataset_metadata(entry, embodiments, carrier):
    info = {} if embodiments is None else {"embodiments": embodiments}
    assert camera_carrier(entry, info) == carrier
    title = Camera(entry["name"], 32, 32, carrier).title
    assert title == (f"{entry['name']} ({carrier})" if carrier else entry["name"])


def _two_arm_dataset(root: Path, mounts: bool) -> Path:
    """The tiny dataset with a two-arm dataset's cameras; `mounts`: its dataset_info.json as
    `factory run` writes a two-arm one (embodiment arms, each wrist camera's mount), else as a
    one-arm dataset's (no arms, no mounts)."""
    data = make_dataset(root, cameras=TWO_ARM_CAMERAS, episodes=((0, 0, 3),))
    info = json.loads((data / "dataset_info.json").read_text())
    if mounts:
        info["embodiments"] = PAIR
        for i, arm in enumerate(("right", "left")):
            info["cameras"][1 + i]["mount"] = _mount(i, arm)
    save_dataset_info(data, info)
    return data


def test_contact_sheet_labels_wrist_cameras_by_arm(tmp_path):
    """The same frames, with and without the two-arm metadata: only the wrist cameras' labels
    differ (their column groups' header); the front view's label and every frame are the same."""
    two = np.asarray(
        Image.open(
            write_contact_sheet(_two_arm_dataset(tmp_path / "two", True), tmp_path / "a.png")
        )
    )
    one = np.asarray(
        Image.open(
            write_contact_sheet(_two_arm_dataset(tmp_path / "one", False), tmp_path / "b.png")
        )
    )
    assert two.shape == one.shape
    layout = make_sheet_layout([Camera(n, w, h) for n, (w, h) in TWO_ARM_CAMERAS.items()], rows=1)
    header = slice(0, layout.first_row_y)  # the title (the same on both), the labels
    for c, name in enumerate(TWO_ARM_CAMERAS):
        group = slice(layout.group_x[c], layout.group_x[c] + layout.group_width(c))
        differs = not np.array_equal(two[header, group], one[header, group])
        assert differs == (name != "agentview"), name
    rows = slice(layout.first_row_y, None)
    assert np.array_equal(two[rows], one[rows])
