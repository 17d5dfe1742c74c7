"""The contact sheet's geometry and drawing: a row an episode, first / middle / last frame a camera.

    cameras (name, width, height), rows                    make_sheet_layout -> SheetLayout
    records chosen (the first N, plus the variants
      of the first trajectory)                             sheet_records
    (episode, camera, step) -> RGB frame, for the
      steps sheet_steps picks                              (read by demofactory.build.preview)
      -> one RGB image: title, labels, captions, frames    draw_sheet

Frames are drawn at an integer multiple of their size (nearest neighbour), so
that an 84x84 render is big enough to read and its pixels stay honest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from demofactory.shards import EpisodeRecord
from PIL import Image, ImageDraw, ImageFont

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


@dataclass(frozen=True)
class Camera:
    """One camera of a dataset: frame size in pixels, and the size it is shown at.

    `carrier`: on a two-arm dataset, the part of a robot that carries the camera ("right
    wrist"; `demofactory.build.preview.camera_carrier`); "" for a scene camera or one arm."""

    name: str
    width: int
    height: int
    carrier: str = ""

    @property
    def title(self) -> str:
        """The name over its column group: robosuite's camera name, then its carrier if any."""
        return f"{self.name} ({self.carrier})" if self.carrier else self.name

    @property
    def display_size(self) -> tuple[int, int]:
        """(width, height) on the sheet and in videos: the short side scaled into
        [MIN_SIDE, MAX_SIDE]."""
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
    trajectory: variant k of trajectory a is episode a * K + k, so they are adjacent rows.

    A mixed-robot dataset (episodes of more than one embodiment): each robot's first
    ceil(episodes / robots) episodes, a robot's rows together, robots in order of appearance."""
    robots = list(dict.fromkeys(filter(None, (_robot(r) for r in records))))
    if len(robots) > 1:
        per = -(-episodes // len(robots))
        return tuple(
            r for robot in robots for r in [x for x in records if _robot(x) == robot][:per]
        )
    chosen = list(records[:episodes])
    if records and "trajectory" in records[0].provenance:
        first = records[0].provenance["trajectory"]
        chosen += [r for r in records[len(chosen) :] if r.provenance.get("trajectory") == first]
    return tuple(chosen)


def draw_sheet(
    layout: SheetLayout,
    title: str,
    records: Sequence[EpisodeRecord],
    frames: Mapping[tuple[int, str, int], Image.Image],
) -> Image.Image:
    """The sheet: `title`, camera and column labels, then a captioned row of frames a record.

    `frames` maps (episode, camera, step) to the RGB frame, for the `sheet_steps` of each
    record and every camera of `layout`.
    """
    font = _font()
    sheet = Image.new("RGB", (layout.width, layout.height), _BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    text_width = layout.width - 2 * _MARGIN
    draw.text((_MARGIN, _MARGIN), _fit(draw, title, font, text_width), fill=_TEXT, font=font)
    header_y = _MARGIN + layout.line_height + _ROW_GAP
    for c, camera in enumerate(layout.cameras):
        label = f"{camera.title}  ({camera.width}x{camera.height})"
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
        robot = f"{_robot(record)}  \u00b7  " if _robot(record) else ""
        caption = (
            f"{robot}episode {record.index}{_variant_caption(record)}   "
            f"\u201c{record.instruction}\u201d   "
            f"{record.length} steps, showing t = {', '.join(map(str, steps))}"
        )
        draw.text((_MARGIN, y), _fit(draw, caption, font, text_width), fill=_TEXT, font=font)
        for c, camera in enumerate(layout.cameras):
            for column, step in enumerate(steps):
                x0, y0, _, _ = layout.cell_box(row, c, column)
                sheet.paste(camera.display(frames[record.index, camera.name, step]), (x0, y0))
    return sheet


def _robot(record: EpisodeRecord) -> str:
    """The robot (embodiment) that performed the episode; "" when not recorded."""
    robot = record.provenance.get("embodiment")
    return robot if isinstance(robot, str) else ""


def _variant_caption(record: EpisodeRecord) -> str:
    """' · trajectory a, variant k' (' (original)' when its look is the unmodified scene);
    '' without variants."""
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
