"""What the `factory` verbs share: spec loading, path arguments, readers' snapshots, and
naming a stored dataset by its URL in messages."""

from __future__ import annotations

import argparse
from pathlib import Path

from demofactory.errors import UserError


def _int_at_least(lowest: int):
    """An argparse type: an integer >= `lowest`, with a message naming what was expected."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer >= {lowest}, got {text!r}"
            ) from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lowest}, got {value}")
        return value

    return parse


_positive_int, _non_negative_int = _int_at_least(1), _int_at_least(0)


def _load(path: Path, overrides: dict | None = None):
    """load_spec (pure, with the command's --set overrides), the texture model check (cheap),
    then resolve (builds the env)."""
    from demofactory.seeds.resolve import resolve_spec

    return resolve_spec(_check(path, overrides))


def _check(
    path: Path,
    overrides: dict | None = None,
    out_dir: Path | str | None = None,
    truncate: bool = False,
    *,
    output: bool = False,
):
    """load_spec (pure), the output directory check (`output`: --out, else the spec's
    output.dir) and the texture model check (cheap)."""
    from demofactory.build.run import check_output_dir
    from demofactory.generators.texture_bank import check_texture_model
    from demofactory.specs.adapters import texture_bank_params
    from demofactory.specs.spec import load_spec

    spec = load_spec(path, overrides)
    target = (out_dir or spec.output_dir()) if output else None
    if isinstance(target, str):  # a store's URL: checked on its local copy, once pulled (run)
        target = None
    if target is not None:
        check_output_dir(target, spec, truncate)
    bank = spec.appearance.textures.bank if spec.appearance.textures is not None else None
    # the model must be on disk unless the bank is already made (reads no weights)
    if bank is not None:
        check_texture_model(texture_bank_params(bank), target, spec_path=spec.path)
    return spec


def _location(text: str) -> Path | str:
    """A path argument: a local path, or a URL (s3://...) kept as one string, normalized
    (demofactory.shards.store.normalize_url): pathlib would fold its "//" (`s3:/bkt/x`). Whether a
    URL is
    accepted is the command's to say (demofactory.outputs, or the store), in one line."""
    from demofactory.shards.store import StoreError, is_remote, normalize_url

    if not is_remote(text):
        return Path(text)
    try:
        return normalize_url(text)
    except StoreError:  # refused in one line once the command looks at it (argparse would
        return text  # print its usage too)


def _reading(location: Path | str, *, shards: bool = True, fresh: bool = False, partial=False):
    """A reader's private snapshot of the dataset at `location`, a folder or a store's URL
    (demofactory.shards.snapshot: never the files a writer is changing, nor a driver's local copy; a
    run
    writing it is one line). `shards=False`: its top-level files only; `fresh`: a stored
    dataset's shards downloaded again (what the store holds now); `partial`: a run's committed
    shards read as far as its journal goes (`inspect`). Messages name `location`, not the
    snapshot (`_main`)."""
    from demofactory.shards.snapshot import reading

    if isinstance(location, Path) and not location.exists():
        raise UserError(f"{location}: no such dataset directory")
    return reading(location, shards=shards, fresh=fresh, partial=partial)


# A stored dataset's local copy -> its URL: messages name the dataset the user gave, not the
# cache folder a reader happened to look into (see `user_message`).


_LOCAL_COPIES: dict[str, str] = {}


def _control(
    note: str, two_arm: bool = False, grippers: bool = True, one_robot: bool = False
) -> str:
    """How steps are taken: demofactory.simulation.fast_step, or robosuite's env.step and why.
    `two_arm`: the scene's env holds two arms (the fast loop is PairStepper); `grippers`: its
    arms have grippers (TwoArmPegInHole's have bare wrists); `one_robot`: both arms are one
    robot's (GR-1's, with its hands)."""
    if note:
        return f"robosuite env.step ({note})"
    if two_arm:
        hands = "OSC and grippers" if grippers else "OSC, no grippers"
        whose = "both arms'" if one_robot else "both robots'"
        return f"fast (demofactory.simulation.fast_step.PairStepper: {whose} {hands})"
    return "fast (demofactory.simulation.fast_step)"


def _shown(text: str) -> str:
    """`text` naming datasets as the user did, not the private snapshots readers work on."""
    from demofactory.shards.snapshot import shown_as

    return shown_as(text)


def _shown_in(value):
    """`value` (a JSON document) with `_shown` applied to every string in it."""
    if isinstance(value, str):
        return _shown(value)
    if isinstance(value, dict):
        return {k: _shown_in(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_shown_in(v) for v in value]
    return value


def _as_given(text: str) -> str:
    """`text` with each stored dataset's local copy named by its URL."""
    for local, url in _LOCAL_COPIES.items():
        text = text.replace(local, url)
    return text
