"""`factory preview`: look at a dataset without a training loader.

    factory preview out/stack          # writes out/stack/preview/

    dataset_info.json (cameras, fps) + episodes.jsonl (which shard holds an episode)
      -> per shard: one pass over its tar by the strict reader (demofactory.shards.tario), stopping
         after the last wanted episode
      -> a stream of (episode, camera, step, RGB image), decoded only for the steps wanted
      -> contact_sheet.png: a row an episode, first / middle / last frame of each camera
         under its name (on a two-arm dataset, a camera a robot carries also names the arm:
         "robot0_eye_in_hand (right wrist)", `camera_carrier`);
         the appearance variants of the first trajectory in adjacent rows, captioned
         "variant k" (drawn by demofactory.build.contact_sheet)
      -> e00000000_<camera>.mp4: every frame of one episode, one file a camera

Frames are drawn at an integer multiple of their size (nearest neighbour), so
that an 84x84 render is big enough to read and its pixels stay honest.
Both outputs are written to a temporary name and renamed once complete.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import numpy as np
from demofactory.build.contact_sheet import (
    Camera,
    draw_sheet,
    make_sheet_layout,
    sheet_records,
    sheet_steps,
)
from demofactory.errors import UserError
from demofactory.shards import (
    DatasetError,
    EpisodeRecord,
    Manifest,
    check_shard,
    load_dataset_info,
    load_episodes,
    load_manifest,
    shards_dir,
)
from demofactory.shards.format import atomic_output
from demofactory.shards.tario import read_samples
from PIL import Image

PREVIEW_DIRNAME = "preview"
CONTACT_SHEET_FILENAME = "contact_sheet.png"

# A sample's key, e00000042_t0007: its members are <key>.<camera>.jpg, <key>.action.npy, ...
_KEY = re.compile(r"^e(\d+)_t(\d+)$")


def write_contact_sheet(dataset_dir: Path, out_png: Path, episodes: int = 6) -> Path:
    """A PNG grid of the first `episodes` episodes (by index) of a dataset; returns its path.

    One row an episode, captioned with its index, instruction and length (and, in a
    dataset with appearance variants, its trajectory and variant); for each camera
    its first, middle and last frame (see `sheet_steps`). Every variant of the first
    trajectory is shown, in adjacent rows, even past `episodes`. Raises `UserError`
    for a missing or unreadable dataset or one without cameras.
    """
    return _write_sheet(_load_dataset(dataset_dir), Path(out_png), episodes)


def _write_sheet(dataset: _Dataset, out_png: Path, episodes: int) -> Path:
    if episodes < 1:
        raise UserError(f"episodes must be >= 1, got {episodes}")
    chosen = sheet_records(dataset.records, episodes)
    wanted = {record.index: set(sheet_steps(record.length)) for record in chosen}
    frames: dict[tuple[int, str, int], Image.Image] = {}
    for shard, group in _by_shard(chosen).items():
        for index, camera, step, image in _iter_frames(
            dataset, shard, {r.index: wanted[r.index] for r in group}
        ):
            frames[index, camera, step] = image
    _check_complete(dataset, chosen, wanted, frames)
    layout = make_sheet_layout(dataset.cameras, len(chosen))
    robots = {r.provenance.get("embodiment") for r in chosen} - {None}
    shown = f"each robot's first ({', '.join(sorted(robots))})" if len(robots) > 1 else ""
    title = (
        f"{dataset.name}  \u00b7  {len(dataset.records)} episodes at {dataset.fps:g} fps"
        f"  \u00b7  {shown or f'the first {len(chosen)} by index'}"
    )
    sheet = draw_sheet(layout, title, chosen, frames)
    try:
        out_png.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(out_png) as f:
            sheet.save(f, format="PNG")
    except OSError as err:
        why = _why(err, out_png)
        raise UserError(f"{out_png}: cannot write the contact sheet ({why})") from None
    return out_png


def _why(err: BaseException, path: Path) -> str:
    """Why writing `path` failed, in a few words. ffmpeg (imageio) reports a full disk as a
    broken pipe with its whole command line and log: the disk's free space says what it was."""
    import errno
    import shutil

    if isinstance(err, OSError) and err.errno not in (None, errno.EPIPE) and err.strerror:
        return err.strerror
    folder = next((p for p in (path.parent, *path.parents) if p.is_dir()), Path("."))
    try:
        if shutil.disk_usage(folder).free < 1 << 20:
            return "no space left on the device"
    except OSError:
        pass
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return f"the encoder stopped: {first}"


def write_episode_videos(
    dataset_dir: Path, out_dir: Path, episode: int | None = None
) -> list[Path]:
    """One H.264 mp4 a camera of one episode (default: the lowest index) at the dataset's fps.

    Files are ``out_dir/e00000042_<camera>.mp4``, in the order of the cameras in
    dataset_info.json; frames are upscaled like the contact sheet's and padded
    (black, bottom/right) to even sizes, which H.264's 4:2:0 chroma needs.
    """
    return _write_videos(_load_dataset(dataset_dir), Path(out_dir), episode)


def _write_videos(dataset: _Dataset, out_dir: Path, episode: int | None) -> list[Path]:
    record = _pick_episode(dataset, episode)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"e{record.index:08d}_{camera.name}.mp4" for camera in dataset.cameras]
    # The extension stays last: ffmpeg picks the container from it.
    temps = [path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}") for path in paths]
    try:
        try:
            _encode_videos(dataset, record, temps)
        except (OSError, RuntimeError) as err:  # imageio: a broken pipe to ffmpeg, its log
            written = next((p for p, t in zip(paths, temps, strict=True) if t.exists()), paths[0])
            raise UserError(f"{written}: cannot write the video ({_why(err, written)})") from None
        for tmp, path in zip(temps, paths, strict=True):
            _check_video(tmp, path, record.length)
            os.replace(tmp, path)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    return paths


def _check_video(tmp: Path, path: Path, frames: int) -> None:
    """A UserError naming `path` unless `tmp` is a whole mp4 of `frames` frames: ffmpeg stopped
    by a file size limit (or some full disks) truncates its output and still exits 0."""
    import av

    try:
        with av.open(str(tmp)) as container:
            found = container.streams.video[0].frames  # the mp4's own count (its moov atom)
    except (av.error.FFmpegError, IndexError, OSError):
        found = 0
    if found == frames:
        return
    reason = _why(OSError(), path)  # "no space left on the device" when that is what it was
    if reason.startswith("the encoder stopped"):
        reason = f"it holds {found} of {frames} frames: cut short (a full disk, a size limit?)"
    raise UserError(f"{path}: cannot write the video ({reason})")


def preview(dataset_dir: Path, out_dir: Path | None = None, episodes: int = 6) -> dict[str, Any]:
    """Contact sheet and videos of a dataset, in `out_dir` (default ``DIR/preview``).

    Returns {"contact_sheet": Path, "videos": [Path, ...]}; the videos are of
    the first episode. Raises `UserError` as the two writers do.
    """
    dataset = _load_dataset(dataset_dir)  # fails on a bad dataset before anything is created
    out_dir = dataset.path / PREVIEW_DIRNAME if out_dir is None else Path(out_dir)
    sheet = _write_sheet(dataset, out_dir / CONTACT_SHEET_FILENAME, episodes)
    videos = _write_videos(dataset, out_dir, None)
    return {"contact_sheet": sheet, "videos": videos}


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Dataset:
    path: Path
    name: str
    fps: float
    cameras: tuple[Camera, ...]
    records: tuple[EpisodeRecord, ...]  # sorted by index
    manifest: Manifest = Manifest()
    checked: set[str] = field(default_factory=set)  # shards whose checksum matched the manifest


def _load_dataset(dataset_dir: Path) -> _Dataset:
    path = Path(dataset_dir)
    if not path.is_dir():
        raise UserError(f"{path}: no such dataset directory")
    try:
        info = load_dataset_info(path)
        records = load_episodes(path)
        manifest = load_manifest(path)
    except (OSError, DatasetError) as err:  # a DatasetError, with the dataset's path in front
        raise DatasetError(f"{path}: not a readable dataset ({err})") from None
    if info is None:
        raise UserError(f"{path}: not a demofactory dataset (no dataset_info.json)")
    cameras = _cameras(path, info)
    if not cameras:
        raise UserError(
            f"{path}: a low-dimensional dataset (no cameras in dataset_info.json): "
            "nothing to preview"
        )
    if not records:
        raise UserError(
            f"{path}: no episodes in episodes.jsonl (an unfinished run? "
            "run `factory run` again to finish it)"
        )
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise UserError(f"{path}: dataset_info.json: 'fps' must be a number > 0, got {fps!r}")
    return _Dataset(
        path=path,
        name=str(info.get("name") or path.name),
        fps=fps,
        cameras=cameras,
        records=tuple(sorted(records, key=lambda record: record.index)),
        manifest=manifest,
    )


def _cameras(path: Path, info: Mapping[str, Any]) -> tuple[Camera, ...]:
    cameras = []
    for i, entry in enumerate(info.get("cameras") or []):
        try:
            camera = Camera(
                entry["name"], entry["width"], entry["height"], camera_carrier(entry, info)
            )
        except (KeyError, TypeError):
            raise UserError(
                f"{path}: dataset_info.json: cameras[{i}] needs name, width, height; got {entry!r}"
            ) from None
        if not all(isinstance(v, int) and v > 0 for v in (camera.width, camera.height)):
            raise UserError(
                f"{path}: dataset_info.json: cameras[{i}] width and height must be ints > 0, "
                f"got {entry!r}"
            )
        cameras.append(camera)
    return tuple(cameras)


# robosuite names robot i's cameras robot<i>_<camera>; its hand camera is eye_in_hand
_ROBOT_CAMERA = re.compile(r"^robot(\d+)_(.+)$")


def camera_carrier(entry: Mapping[str, Any], info: Mapping[str, Any]) -> str:
    """What carries a camera of a two-arm dataset, for its label: "right wrist", "left arm";
    "" for a scene camera, or on a one-arm dataset.

    From the camera's `mount` in dataset_info.json (robot index, arm, wrist: found in the
    model's body tree when the dataset was written). A two-arm dataset written before cameras
    had a `mount` has only its embodiment's `arms` (robot 0's first): then robosuite's name
    robot<i>_eye_in_hand is robot i's wrist camera, and its arms[i] names the arm."""
    mount = entry.get("mount")
    if isinstance(mount, Mapping) and isinstance(mount.get("arm"), str):
        return f"{mount['arm']} {'wrist' if mount.get('wrist') else 'arm'}"
    embodiments = info.get("embodiments")
    first = next(iter(embodiments.values()), None) if isinstance(embodiments, Mapping) else None
    arms = first.get("arms") if isinstance(first, Mapping) else None
    match = _ROBOT_CAMERA.match(str(entry.get("name", "")))
    if not isinstance(arms, list) or len(arms) < 2 or match is None:
        return ""
    robot = int(match[1])
    if robot >= len(arms) or match[2] != "eye_in_hand":
        return ""
    return f"{arms[robot]} wrist"


def _pick_episode(dataset: _Dataset, episode: int | None) -> EpisodeRecord:
    if episode is None:
        return dataset.records[0]
    for record in dataset.records:
        if record.index == episode:
            return record
    indices = [record.index for record in dataset.records]
    shown = ", ".join(map(str, indices[:8])) + (", ..." if len(indices) > 8 else "")
    raise UserError(
        f"{dataset.path}: no episode {episode} in episodes.jsonl; its episodes are {shown}"
    )


def _by_shard(records: Sequence[EpisodeRecord]) -> dict[str, list[EpisodeRecord]]:
    # Shard file name -> its records, so that each tar is read once.
    groups: dict[str, list[EpisodeRecord]] = {}
    for record in records:
        groups.setdefault(record.shard, []).append(record)
    return groups


def _iter_frames(
    dataset: _Dataset, shard_name: str, wanted: Mapping[int, Collection[int] | None]
) -> Iterator[tuple[int, str, int, Image.Image]]:
    """Frames of the `wanted` episodes in shard `shard_name`, in tar order.

    `wanted` maps an episode index to the steps to decode (None: every step).
    Yields (episode, camera, step, RGB image); stops at the first sample past
    the last wanted episode, as episodes are whole and in index order in a shard.
    The shard is read by the strict reader: a corrupt tar raises `TarFormatError`.
    """
    shard = shards_dir(dataset.path) / shard_name
    _check_listed(dataset, shard_name)
    cameras = {f"{camera.name}.jpg": camera for camera in dataset.cameras}
    last = max(wanted)
    try:
        for sample in read_samples(shard, cameras.__contains__):
            match = _KEY.match(sample.key)
            if match is None:
                continue
            index, step = int(match[1]), int(match[2])
            if index > last:
                return
            steps = wanted.get(index, ())
            if steps is not None and step not in steps:
                continue
            for suffix, data in sample.members.items():
                name = f"{sample.key}.{suffix}"
                yield index, cameras[suffix].name, step, _decode(shard, name, data, cameras[suffix])
    except OSError as err:  # PIL's UnidentifiedImageError is an OSError
        raise UserError(f"{shard}: cannot read frames ({err})") from None


def _check_listed(dataset: _Dataset, shard_name: str) -> None:
    # Only the shards the preview reads are hashed (a whole dataset may be large), each once.
    if shard_name in dataset.checked:
        return
    info = dataset.manifest.by_name().get(shard_name)
    if info is None:
        raise UserError(
            f"{shards_dir(dataset.path) / shard_name}: holds episodes of episodes.jsonl, "
            "yet manifest.json does not list it (an unfinished run? run factory verify)"
        )
    check_shard(dataset.path, info)  # a DatasetError names the shard
    dataset.checked.add(shard_name)


def _decode(shard: Path, name: str, data: bytes, camera: Camera) -> Image.Image:
    image = Image.open(io.BytesIO(data)).convert("RGB")
    if image.size != (camera.width, camera.height):
        raise UserError(
            f"{shard}: {name} is {image.size[0]}x{image.size[1]}, "
            f"dataset_info.json says {camera.name} is {camera.width}x{camera.height}"
        )
    return image


def _check_complete(
    dataset: _Dataset,
    records: Sequence[EpisodeRecord],
    wanted: Mapping[int, Collection[int]],
    frames: Mapping[tuple[int, str, int], Image.Image],
) -> None:
    for record in records:
        for camera in dataset.cameras:
            missing = sorted(
                s for s in wanted[record.index] if (record.index, camera.name, s) not in frames
            )
            if missing:
                raise UserError(
                    f"{shards_dir(dataset.path) / record.shard}: episode {record.index} has no "
                    f"{camera.name} frame for steps {missing} "
                    f"(episodes.jsonl says {record.length} steps)"
                )


# --- writing ---------------------------------------------------------------------------------


def _encode_videos(dataset: _Dataset, record: EpisodeRecord, temps: Sequence[Path]) -> None:
    with ExitStack() as stack:
        writers = {
            camera.name: stack.enter_context(
                imageio.get_writer(
                    tmp,
                    format="FFMPEG",
                    mode="I",
                    fps=dataset.fps,
                    codec="libx264",
                    pixelformat="yuv420p",
                    quality=8,
                    macro_block_size=2,
                )
            )
            for camera, tmp in zip(dataset.cameras, temps, strict=True)
        }
        cameras = {camera.name: camera for camera in dataset.cameras}
        counts = dict.fromkeys(writers, 0)
        for _, name, step, image in _iter_frames(dataset, record.shard, {record.index: None}):
            if step != counts[name]:
                break  # a gap: reported below
            writers[name].append_data(_even(np.asarray(cameras[name].display(image))))
            counts[name] += 1
    for name, count in counts.items():
        if count != record.length:
            raise UserError(
                f"{shards_dir(dataset.path) / record.shard}: episode {record.index} has "
                f"{count} consecutive {name} frames from step 0, "
                f"episodes.jsonl says {record.length}"
            )


def _even(frame: np.ndarray) -> np.ndarray:
    # yuv420p subsamples chroma 2x2, so libx264 refuses odd sizes; pad with black.
    h, w = frame.shape[:2]
    return np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)))
