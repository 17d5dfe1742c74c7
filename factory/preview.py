"""`factory preview`: look at a dataset without a training loader.

    factory preview out/stack          # writes out/stack/preview/

    dataset_info.json (cameras, fps) + episodes.jsonl (which shard holds an episode)
      -> per shard: one pass over its tar, stopping after the last wanted episode
      -> a stream of (episode, camera, step, RGB image), decoded only for the steps wanted
      -> contact_sheet.png: a row an episode, first / middle / last frame of each camera;
         the appearance variants of the first trajectory in adjacent rows, captioned "variant k"
      -> e00000000_<camera>.mp4: every frame of one episode, one file a camera

Frames are drawn at an integer multiple of their size (nearest neighbour), so
that an 84x84 render is big enough to read and its pixels stay honest.
Both outputs are written to a temporary name and renamed once complete.
"""

from __future__ import annotations

import io
import math
import os
import re
import tarfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from factory.errors import UserError
from shards import (
    EpisodeRecord,
    Manifest,
    check_shard,
    load_dataset_info,
    load_episodes,
    load_manifest,
    shards_dir,
)
from shards.format import atomic_output

PREVIEW_DIRNAME = "preview"
CONTACT_SHEET_FILENAME = "contact_sheet.png"

MIN_SIDE = 128  # a frame's short side is upscaled to at least this ...
MAX_SIDE = 256  # ... and a larger one shrunk to at most this, so the sheet stays a sensible size
SHEET_COLUMNS = ("first", "middle", "last")

_FONT_SIZE = 14
_MARGIN = 12
_FRAME_GAP = 4  # between the three frames of one camera
_GROUP_GAP = 24  # between cameras
_ROW_GAP = 14  # between episodes
_MIN_TEXT_WIDTH = 420  # a one-camera sheet still has room for a caption
_BACKGROUND = (246, 246, 246)
_TEXT = (20, 20, 20)
_MUTED = (110, 110, 110)
_RULE = (210, 210, 210)

# A shard member: <key>.<camera>.jpg, <key>.action.npy, ... with key e00000042_t0007.
_MEMBER = re.compile(r"^e(\d+)_t(\d+)\.(.+)$")


@dataclass(frozen=True)
class Camera:
    """One camera of a dataset: frame size in pixels, and the size it is shown at."""

    name: str
    width: int
    height: int

    @property
    def display_size(self) -> tuple[int, int]:
        """(width, height) on the sheet and in videos: short side scaled into [MIN_SIDE, MAX_SIDE]."""
        short = min(self.width, self.height)
        if short < MIN_SIDE:
            k = math.ceil(MIN_SIDE / short)
            return self.width * k, self.height * k
        if short > MAX_SIDE:
            k = math.ceil(short / MAX_SIDE)
            return max(1, self.width // k), max(1, self.height // k)
        return self.width, self.height

    def display(self, image: Image.Image) -> Image.Image:
        """`image` at `display_size`: nearest when enlarging, box filter when shrinking."""
        size = self.display_size
        if size == image.size:
            return image
        shrink = size[0] < image.size[0]
        return image.resize(size, Image.Resampling.BOX if shrink else Image.Resampling.NEAREST)


@dataclass(frozen=True)
class SheetLayout:
    """Where things go on a contact sheet, in pixels (x right, y down).

    A title line, then camera names over their three columns and a line of
    column labels (first / middle / last), then per episode a caption line with
    the frames below it. Each frame is drawn top-left aligned in its cell.
    """

    cameras: tuple[Camera, ...]
    rows: int
    line_height: int
    width: int
    height: int
    group_x: tuple[int, ...]  # left edge of each camera's three columns
    first_row_y: int  # top of the first episode's caption

    @property
    def row_height(self) -> int:
        """Caption, frames and the gap below them."""
        return (
            self.line_height + _FRAME_GAP + max(c.display_size[1] for c in self.cameras) + _ROW_GAP
        )

    def group_width(self, camera: int) -> int:
        """Width of one camera's three columns."""
        return 3 * self.cameras[camera].display_size[0] + 2 * _FRAME_GAP

    def caption_y(self, row: int) -> int:
        """Top of episode row `row`'s caption."""
        return self.first_row_y + row * self.row_height

    def cell_box(self, row: int, camera: int, column: int) -> tuple[int, int, int, int]:
        """(x0, y0, x1, y1), exclusive end, of a frame: column 0, 1, 2 = first, middle, last."""
        w, h = self.cameras[camera].display_size
        x0 = self.group_x[camera] + column * (w + _FRAME_GAP)
        y0 = self.caption_y(row) + self.line_height + _FRAME_GAP
        return x0, y0, x0 + w, y0 + h


def make_sheet_layout(cameras: Sequence[Camera], rows: int) -> SheetLayout:
    """The layout of a sheet with `rows` episodes of `cameras`, in Pillow's default font."""
    line_height = _line_height(_font())
    if not cameras or rows < 1:
        raise ValueError(f"a contact sheet needs cameras and rows >= 1, got {len(cameras)}, {rows}")
    group_x, x = [], _MARGIN
    for camera in cameras:
        group_x.append(x)
        x += 3 * camera.display_size[0] + 2 * _FRAME_GAP + _GROUP_GAP
    content_width = max(x - _GROUP_GAP - _MARGIN, _MIN_TEXT_WIDTH)
    first_row_y = _MARGIN + line_height + _ROW_GAP + 2 * line_height + _ROW_GAP
    row_height = line_height + _FRAME_GAP + max(c.display_size[1] for c in cameras) + _ROW_GAP
    return SheetLayout(
        cameras=tuple(cameras),
        rows=rows,
        line_height=line_height,
        width=content_width + 2 * _MARGIN,
        height=first_row_y + rows * row_height - _ROW_GAP + _MARGIN,
        group_x=tuple(group_x),
        first_row_y=first_row_y,
    )


def sheet_steps(length: int) -> tuple[int, int, int]:
    """The steps shown for an episode of `length` steps: first, middle (length // 2), last."""
    return 0, length // 2, length - 1


def sheet_records(records: Sequence[EpisodeRecord], episodes: int) -> tuple[EpisodeRecord, ...]:
    """The first `episodes` records by index, extended to every appearance variant of the first
    trajectory: variant k of trajectory a is episode a * K + k, so they are adjacent rows."""
    chosen = list(records[:episodes])
    if records and "trajectory" in records[0].provenance:
        first = records[0].provenance["trajectory"]
        chosen += [r for r in records[len(chosen) :] if r.provenance.get("trajectory") == first]
    return tuple(chosen)


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
    sheet = _draw_sheet(layout, dataset, chosen, frames, _font())
    out_png.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(out_png) as f:
        sheet.save(f, format="PNG")
    return out_png


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
        _encode_videos(dataset, record, temps)
        for tmp, path in zip(temps, paths, strict=True):
            os.replace(tmp, path)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    return paths


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
    except (OSError, ValueError) as err:  # DatasetError is a ValueError
        raise UserError(f"{path}: not a readable dataset ({err})") from None
    if info is None:
        raise UserError(f"{path}: not a demofactory dataset (no dataset_info.json)")
    cameras = _cameras(path, info)
    if not cameras:
        raise UserError(
            f"{path}: a low-dimensional dataset (no cameras in dataset_info.json): nothing to preview"
        )
    if not records:
        raise UserError(
            f"{path}: no episodes in episodes.jsonl (an unfinished run? run `factory run` again to finish it)"
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
            camera = Camera(entry["name"], entry["width"], entry["height"])
        except (KeyError, TypeError):
            raise UserError(
                f"{path}: dataset_info.json: cameras[{i}] needs name, width, height; got {entry!r}"
            ) from None
        if not all(isinstance(v, int) and v > 0 for v in (camera.width, camera.height)):
            raise UserError(
                f"{path}: dataset_info.json: cameras[{i}] width and height must be ints > 0, got {entry!r}"
            )
        cameras.append(camera)
    return tuple(cameras)


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
    Yields (episode, camera, step, RGB image); stops at the first member past
    the last wanted episode, as episodes are whole and in index order in a shard.
    """
    shard = shards_dir(dataset.path) / shard_name
    _check_listed(dataset, shard_name)
    cameras = {camera.name: camera for camera in dataset.cameras}
    last = max(wanted)
    try:
        with tarfile.open(shard, mode="r:") as tar:
            for member in tar:
                match = _MEMBER.match(member.name)
                if match is None:
                    continue
                index, step, rest = int(match[1]), int(match[2]), match[3]
                if index > last:
                    return
                steps = wanted.get(index, ())
                camera = cameras.get(rest.removesuffix(".jpg")) if rest.endswith(".jpg") else None
                if camera is None or (steps is not None and step not in steps):
                    continue
                yield (
                    index,
                    camera.name,
                    step,
                    _decode(shard, member, tar.extractfile(member), camera),
                )
    except (OSError, tarfile.TarError) as err:  # PIL's UnidentifiedImageError is an OSError
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
    try:
        check_shard(dataset.path, info)
    except ValueError as err:  # DatasetError
        raise UserError(str(err)) from None
    dataset.checked.add(shard_name)


def _decode(shard: Path, member: tarfile.TarInfo, f: Any, camera: Camera) -> Image.Image:
    image = Image.open(io.BytesIO(f.read())).convert("RGB")
    if image.size != (camera.width, camera.height):
        raise UserError(
            f"{shard}: {member.name} is {image.size[0]}x{image.size[1]}, "
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
                    f"{camera.name} frame for steps {missing} (episodes.jsonl says {record.length} steps)"
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
                f"{count} consecutive {name} frames from step 0, episodes.jsonl says {record.length}"
            )


def _even(frame: np.ndarray) -> np.ndarray:
    # yuv420p subsamples chroma 2x2, so libx264 refuses odd sizes; pad with black.
    h, w = frame.shape[:2]
    return np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)))


def _draw_sheet(
    layout: SheetLayout,
    dataset: _Dataset,
    records: Sequence[EpisodeRecord],
    frames: Mapping[tuple[int, str, int], Image.Image],
    font: Any,
) -> Image.Image:
    sheet = Image.new("RGB", (layout.width, layout.height), _BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    text_width = layout.width - 2 * _MARGIN
    title = (
        f"{dataset.name}  \u00b7  {len(dataset.records)} episodes at {dataset.fps:g} fps"
        f"  \u00b7  the first {len(records)} by index"
    )
    draw.text((_MARGIN, _MARGIN), _fit(draw, title, font, text_width), fill=_TEXT, font=font)
    header_y = _MARGIN + layout.line_height + _ROW_GAP
    for c, camera in enumerate(layout.cameras):
        label = f"{camera.name}  ({camera.width}x{camera.height})"
        _centred(draw, label, font, layout.group_x[c], layout.group_width(c), header_y, _TEXT)
        for column, word in enumerate(SHEET_COLUMNS):
            x0, _, x1, _ = layout.cell_box(0, c, column)
            _centred(draw, word, font, x0, x1 - x0, header_y + layout.line_height, _MUTED)
    for row, record in enumerate(records):
        y = layout.caption_y(row)
        draw.line(
            (_MARGIN, y - _ROW_GAP // 2, layout.width - _MARGIN, y - _ROW_GAP // 2), fill=_RULE
        )
        steps = sheet_steps(record.length)
        caption = (
            f"episode {record.index}{_variant_caption(record)}   \u201c{record.instruction}\u201d   "
            f"{record.length} steps, showing t = {', '.join(map(str, steps))}"
        )
        draw.text((_MARGIN, y), _fit(draw, caption, font, text_width), fill=_TEXT, font=font)
        for c, camera in enumerate(layout.cameras):
            for column, step in enumerate(steps):
                x0, y0, _, _ = layout.cell_box(row, c, column)
                sheet.paste(camera.display(frames[record.index, camera.name, step]), (x0, y0))
    return sheet


def _variant_caption(record: EpisodeRecord) -> str:
    """' · trajectory a, variant k' (' (original)' when its look is the unmodified scene); '' without variants."""
    prov = record.provenance
    if "variant" not in prov:
        return ""
    look = prov.get("appearance") or {}
    original = (
        " (original)" if not any(look.get(key) for key in ("surfaces", "lights", "cameras")) else ""
    )
    return f"  \u00b7  trajectory {prov.get('trajectory')}, variant {prov['variant']}{original}"


def _font() -> Any:
    # Pillow's built-in font: a FreeType face when Pillow has FreeType (sizeable), else a bitmap.
    return ImageFont.load_default(size=_FONT_SIZE)


def _line_height(font: Any) -> int:
    _, top, _, bottom = font.getbbox("Ag|")
    return bottom + max(top, 2)


def _fit(draw: ImageDraw.ImageDraw, text: str, font: Any, width: int) -> str:
    """`text`, cut with '...' where it would be wider than `width` pixels."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "...", font=font) > width:
        text = text[:-1]
    return text.rstrip() + "..."


def _centred(
    draw: ImageDraw.ImageDraw, text: str, font: Any, x: int, width: int, y: int, fill: tuple
) -> None:
    text = _fit(draw, text, font, width)
    draw.text((x + (width - draw.textlength(text, font=font)) / 2, y), text, fill=fill, font=font)
