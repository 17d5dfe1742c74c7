"""The one rule for every output path a command is given (docs/outputs.md).

    check_outputs("train-eval", [Output("--out", p, "file"), Output("--save-policy", q, "file")],
                  inputs=[spec, dataset], force=args.force)
        a URL where the command has no store support   ──► refused ("a local path expected")
        inside a dataset's files (or a dataset itself)  ──► refused, even with --force
        the same path as another output of the command  ──► refused
        the same path as an input (the spec, a recording) ─► refused, even with --force
        an existing file, or a non-empty folder         ──► refused without --force
        a folder that cannot hold it / is not writable  ──► refused
    then each output is written through `atomic_write_*` / `atomic_path`: a temporary name
    beside it, renamed over it once whole (a crash leaves the old file, never half a new one).

Every command calls `check_outputs` before any work (training, rendering, the env) so that a
refused output loses nothing and costs nothing. Each refusal is one `UserError` line naming the
path, the flag and what was expected.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from demofactory.errors import UserError
from demofactory.shards.format import DATASET_INFO_FILENAME
from demofactory.shards.store import is_remote, normalize_url

# Inside a dataset folder, the one place a command may write: `factory preview`'s pictures
# (DATASET/preview). Nothing reads it as part of the dataset (verify, exports, the loader).
DATASET_SCRATCH = frozenset({"preview"})


@dataclass(frozen=True)
class Output:
    """One output a command was given: its flag (for messages), its path, and what it is.

    `kind`: "file" (one file written whole), or "dir" (a folder the command fills or makes).
    `store`: True where the command can write to an object store URL (only `factory run`).
    `own`: the command's own dataset folder (`run --out`, `seeds --out`): it may be a dataset
    already (the command's own checks decide whether to resume or refuse it), never a folder
    inside another dataset; its contents are the command's to judge, not this rule's."""

    flag: str
    path: Path | str | None
    kind: Literal["file", "dir"] = "file"
    store: bool = False
    own: bool = False


def check_outputs(
    command: str,
    outputs: Sequence[Output],
    *,
    inputs: Sequence[Path | str | None] = (),
    force: bool | None = False,
) -> None:
    """Refuse (one `UserError` line) any output that breaks the rule in this module's docstring.

    `force`: the command's --force (None where the command has none: then an existing output
    is refused with no mention of --force)."""
    given = [o for o in outputs if o.path is not None]
    seen: dict[str, Output] = {}
    for out in given:
        if is_remote(out.path):
            if not out.store:
                raise UserError(
                    f"{out.path}: {out.flag}: `factory {command}` writes local files only; "
                    "expected a local path (an object store URL is accepted by `factory run "
                    "--out` and as the dataset a command reads)"
                )
            normalize_url(out.path)  # a StoreError (one line) for a URL no store can mean
            continue
        path = Path(out.path)
        real = _real(path)
        _check_not_in_dataset(path, real, out.flag, out.own)
        for other in inputs:
            if other is None or is_remote(other):
                continue
            if _real(Path(other)) == real or (out.kind == "dir" and _inside(_real(other), real)):
                what = "is" if _real(Path(other)) == real else "holds"
                raise UserError(
                    f"{path}: {out.flag}: {what} an input of this command ({other}); expected "
                    "another path (the input would be lost)"
                )
        clash = seen.get(real) or next(
            (o for r, o in seen.items() if _inside(real, r) or _inside(r, real)), None
        )
        if clash is not None:
            raise UserError(
                f"{path}: {out.flag}: the same path as {clash.flag} {clash.path}; expected a "
                "different path for each output"
            )
        seen[real] = out
        _check_writable(path, out, force)


def _real(path: Path) -> str:
    """The absolute path with symlinks resolved (a link onto a dataset file is that file)."""
    return os.path.realpath(os.path.abspath(path))


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def dataset_holding(path: Path | str) -> Path | None:
    """The dataset folder that `path` is, or lies inside (an ancestor with dataset_info.json),
    except its DATASET_SCRATCH folders; None when there is none."""
    real = Path(_real(Path(path)))
    below: str | None = None
    for folder in (real, *real.parents):
        if (folder / DATASET_INFO_FILENAME).is_file():
            return None if below in DATASET_SCRATCH else folder
        below = folder.name
    return None


def _check_not_in_dataset(path: Path, real: str, flag: str, own: bool) -> None:
    found = dataset_holding(real)
    if found is None or (own and str(found) == real):
        return
    where = "is the dataset" if str(found) == real else f"is inside the dataset {found}"
    raise UserError(
        f"{path}: {flag}: {where}; expected a path outside every dataset's files "
        "(writing there would damage the dataset)"
    )


def _check_writable(path: Path, out: Output, force: bool | None) -> None:
    hint = " (or --force to replace it)" if force is not None else ""
    if out.kind == "file":
        if path.is_dir():
            raise UserError(f"{path}: {out.flag}: is a directory, expected a file name")
        if (path.exists() or path.is_symlink()) and not force:
            raise UserError(f"{path}: {out.flag}: already exists; expected a new file{hint}")
        folder = path.parent
        if not folder.is_dir():
            what = "is not a directory" if folder.exists() else "does not exist"
            raise UserError(f"{path}: {out.flag}: its folder {folder} {what}; create it first")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UserError(f"{path}: {out.flag}: cannot write into {folder} (permission denied)")
        return
    if path.is_dir() and not out.own and any(path.iterdir()) and not force:
        raise UserError(
            f"{path}: {out.flag}: exists and is not empty; expected a new or empty folder{hint}"
        )
    check_can_create(path, out.flag)


def check_can_create(path: Path, flag: str) -> None:
    """A UserError unless `path` is a directory this process can write into, or could be made
    one: its nearest existing ancestor a directory this process can write into."""
    if path.exists():
        if not path.is_dir():
            raise UserError(f"{path}: {flag}: exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise UserError(f"{path}: {flag}: not writable (permission denied)")
        return
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UserError(f"{path}: {flag}: cannot be created, {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UserError(f"{path}: {flag}: cannot be created in {ancestor} (permission denied)")


@contextlib.contextmanager
def atomic_path(path: Path | str, flag: str = "") -> Iterator[Path]:
    """A temporary name beside `path` for a library that writes a file itself (torch.save,
    PIL, matplotlib); renamed onto `path` when the block ends, removed on any error. A full
    disk or a refused write is one `UserError` naming `path` (and `flag`)."""
    path = Path(path)
    # The suffix kept last: PIL and matplotlib pick the format from it.
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        where = f"{flag}: " if flag else ""
        raise UserError(f"{path}: {where}cannot write ({err.strerror or err})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path | str, data: bytes, flag: str = "") -> None:
    """Write `data` to `path` through `atomic_path`."""
    with atomic_path(path, flag) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)


def atomic_write_text(path: Path | str, text: str, flag: str = "") -> None:
    """Write `text` (UTF-8) to `path` through `atomic_path`."""
    atomic_write_bytes(path, text.encode("utf-8"), flag)


def spec_files(spec: Path | str | None) -> list[Path]:
    """A spec file and every file it `extends:` (through its parents): the inputs no output of
    a command reading the spec may replace (`calibrate --out BASE.yaml` would make a cycle).
    Unreadable links end the walk: the spec loader reports them."""
    import yaml

    if spec is None or is_remote(spec):
        return []
    found: list[Path] = []
    path = Path(spec)
    while path.is_file() and all(_real(path) != _real(p) for p in found):
        found.append(path)
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
            break
        ref = raw.get("extends") if isinstance(raw, dict) else None
        if not isinstance(ref, str) or not ref.strip():
            break
        path = path.parent / ref
    return found


@contextlib.contextmanager
def replacing(path: Path | str, force: bool) -> Iterator[Path]:
    """Where to build an output that may replace an existing one (`export --force`): `path`
    itself when nothing is there; else a new name beside it, swapped in only once the block
    ended without error (the old file or folder is kept until then, and removed after)."""
    import shutil

    path = Path(path)
    if not force or not (path.exists() or path.is_symlink()):
        yield path
        return
    new = path.with_name(f".{path.name}.new-{os.getpid()}")
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    try:
        yield new
    except BaseException:
        shutil.rmtree(new, ignore_errors=True) if new.is_dir() else new.unlink(missing_ok=True)
        raise
    if new.is_dir() and not path.is_symlink() and path.is_dir():
        os.rename(path, old)  # two renames: no call swaps two folders in one (Linux has
        os.rename(new, path)  # renameat2(RENAME_EXCHANGE), Python no binding for it)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(new, path)  # a file: one atomic rename
