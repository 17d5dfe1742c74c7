"""The videos of a LeRobot export: one mp4 a camera and data file, H.264 in yuv420p.

[H, W, 3] uint8 frames of one episode -> padded to even sizes           _pad_even
  -> encoded at the dataset fps, frame n at n / fps, appended           VideoFile.append
  -> the feature's ``info`` read back from the finished file            probe_video
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

VIDEO_CRF = 18  # x264 constant quality: ~41 dB PSNR against the source JPEGs in the tests
VIDEO_GOP = 2  # LeRobot's default keyframe interval: any frame decodes after at most one other
VIDEO_PRESET = "medium"  # x264's own default, passed explicitly so that info.json can say it


def even(n: int) -> int:
    """`n` rounded up to even: yuv420p needs an even width and height."""
    return n + n % 2


class VideoFile:
    """One mp4 being written: frames appended at `fps` (frame n at n / fps), in yuv420p."""

    def __init__(self, path: Path, width: int, height: int, fps: int, codec: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fps, self.frames, self.bytes = fps, 0, 0
        self._container = av.open(str(path), mode="w", format="mp4")
        self._stream = self._container.add_stream(codec, rate=fps, options=encoder_options(codec))
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = "yuv420p"

    def append(self, frames: Sequence[np.ndarray]) -> tuple[float, float]:
        """Encode [H, W, 3] uint8 frames; returns their (from, to) timestamps in seconds, `to`
        exclusive."""
        start = self.frames
        for pixels in frames:
            frame = av.VideoFrame.from_ndarray(_pad_even(pixels), format="rgb24")
            frame.pts, frame.time_base = self.frames, Fraction(1, self.fps)
            self._mux(self._stream.encode(frame))
            self.frames += 1
        return start / self.fps, self.frames / self.fps

    def close(self) -> None:
        self._mux(self._stream.encode(None))  # flush the encoder's delayed frames
        self._container.close()

    def _mux(self, packets: Sequence[av.Packet]) -> None:
        for packet in packets:
            self.bytes += packet.size
            self._container.mux(packet)


def encoder_options(codec: str) -> dict[str, str]:
    """The options an export video is encoded with (a preset for the x264/x265 encoders)."""
    options = {"crf": str(VIDEO_CRF), "g": str(VIDEO_GOP)}
    return {**options, "preset": VIDEO_PRESET} if codec in ("libx264", "libx265") else options


def _pad_even(pixels: np.ndarray) -> np.ndarray:
    # Repeating the edge (rather than black, as the preview does) keeps the padding
    # from bleeding a dark fringe into the real pixels through chroma subsampling.
    h, w = pixels.shape[:2]
    if h % 2 == 0 and w % 2 == 0:
        return pixels
    return np.pad(pixels, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")


def probe_video(path: Path, fps: int | None = None, *, codec: str = "libx264") -> dict[str, Any]:
    """The ``info`` of a video feature as LeRobot 0.6 writes it (``get_video_info`` with the
    encoder's settings): read back from the file, then what `codec` encoded it with.

    `fps` is unused (the file's frame rate is read), kept for callers that pass it."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        info: dict[str, Any] = {
            "video.height": stream.height,
            "video.width": stream.width,
            "video.codec": stream.codec.canonical_name,
            "video.pix_fmt": stream.pix_fmt,
            "video.fps": int(stream.base_rate),
            "video.channels": 3,
            "has_audio": len(container.streams.audio) > 0,
        }
    return {
        **info,
        "video.g": VIDEO_GOP,
        "video.crf": VIDEO_CRF,
        "video.preset": encoder_options(codec).get("preset"),
        "video.fast_decode": 0,
        "video.video_backend": "pyav",
        "video.extra_options": {},
        "is_depth_map": False,
    }
