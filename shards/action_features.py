"""Action features an export writes instead of the shards' own actions (`factory export --actions`).

    Source (action_layout: the shards' delta OSC parts)
      -> relabeled(source, episodes, relabeler)
           Source with the relabeler's layout; each SourceEpisode's actions
           replaced by relabeler.relabel(episode) [T, A'] float32
      -> the export writes them as it writes any actions (parquet ``action``;
         GR00T's modality.json splits them into the layout's parts)
      -> meta/action_spaces.json: relabeler.report() (layout, each space's
         replay check: success rate, pose error)

The dataset format stands alone (tests/project/test_layers.py): how actions are relabeled (MuJoCo,
robosuite controllers) is the caller's (`demofactory.build.action_spaces`); this module only defines
what
an export asks of a relabeler and applies it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from demofactory.shards.export_source import Source, SourceEpisode
from demofactory.shards.format import ExportError, dumps_json

REPORT_PATH = "meta/action_spaces.json"


class ActionRelabeler(Protocol):
    """What an export needs of a relabeling of its actions.

    layout: (name, size) parts of the new action vector, in order; a name starting with
      ``delta`` is a relative command, any other an absolute one (GR00T's ``absolute``).
    """

    layout: tuple[tuple[str, int], ...]

    def relabel(self, episode: SourceEpisode) -> np.ndarray:
        """The episode's actions in the new layout, [T, sum of sizes] float32."""

    def report(self) -> Mapping[str, Any]:
        """What the relabeling did so far (JSON-ready), written beside the export's metadata."""


def relabeled(
    source: Source, episodes: Iterable[SourceEpisode], relabeler: ActionRelabeler | None
) -> tuple[Source, Iterator[SourceEpisode]]:
    """`source` and its `episodes` with the relabeler's actions (both as given without one)."""
    if relabeler is None:
        return source, iter(episodes)
    layout = tuple((str(name), int(size)) for name, size in relabeler.layout)
    width = sum(size for _, size in layout)
    new_source = dataclasses.replace(source, action_layout=layout)

    def stream() -> Iterator[SourceEpisode]:
        for episode in episodes:
            actions = np.asarray(relabeler.relabel(episode), dtype=np.float32)
            if actions.shape != (episode.length, width):
                raise ExportError(
                    f"episode {episode.record.index}: relabeled actions are {actions.shape}, "
                    f"expected ({episode.length}, {width}) for the layout {list(layout)}"
                )
            yield dataclasses.replace(episode, actions=actions)

    return new_source, stream()


def write_report(root: Path, relabeler: ActionRelabeler | None) -> None:
    """meta/action_spaces.json under the export's (staging) folder `root`, when relabeled."""
    if relabeler is None:
        return
    path = Path(root) / REPORT_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_json(dict(relabeler.report()), indent=2) + "\n", encoding="utf-8")
