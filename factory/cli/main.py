"""The `factory` command.

    factory validate scene_specs/stack.yaml
    factory validate scene_specs/cube_bowl.yaml --still out/stills   # + one PNG per camera
    factory spec-help [generation.transit]   # what a field means; --write: schema, reference
    factory annotate scene_specs/stack.yaml [--plot out/annotate]
    factory annotate --suggest scene_specs/demos/lift_panda_1demo_robosuite100.hdf5  # a spec
    factory annotate scene_specs/lift.yaml --replay 2   # each demo regenerates itself?
    factory run scene_specs/stack.yaml --attempts 20 --out out/stack --workers 2
    factory inspect out/stack [--json]
    factory divergence out/stack [--spec SPEC] [--draws 4] [--ranges r.yaml]   # default: its spec
    factory preview out/stack          # contact sheet PNG + one mp4 per camera
    factory preview out/stack --failures   # the failed attempts kept, captioned: where they failed
    factory verify out/stack           # checksums, sample counts, episodes, stats
    factory export out/stack --to lerobot out/stack-lerobot
    factory export out/stack --to robomimic out/stack.hdf5
    factory export out/stack --to gr00t out/stack-gr00t [--embodiment new_embodiment]
    factory seeds scene_specs/lift_lowdim.yaml --out out/lift-seeds   # the seed demos as a dataset
    factory train-eval out/lift_lowdim --spec scene_specs/lift_lowdim.yaml   # BC policy, rollouts
    factory script scene_specs/pick_place_can.yaml --out demo.hdf5 [--demos 3]   # from waypoints
    factory collect scene_specs/cube_bowl.yaml --out demo.hdf5 [--demos 5]   # teleoperation
    factory calibrate scene_specs/lift.yaml --recordings real.hdf5 --params mass.cube kp delay \
        --out lift.calibrated.yaml          # fitted physics: fragment (+ .html report)

Bad input (a spec, a seed file, an output directory) prints one line naming
the file, the field and what was expected, and exits with code 2.

One module per verb group (`spec_cmds`, `seed_cmds`, `dataset_cmds`, `robustness_cmds`,
`train_cmds`), the parser (`parser`) and what they share (`common`); this one dispatches,
turns every error a user can fix into one line, and SIGTERM into exit 143.
"""

from __future__ import annotations

import sys
import threading

from demofactory.cli.common import _as_given, _shown
from demofactory.cli.dataset_cmds import (
    cmd_export,
    cmd_inspect,
    cmd_preview,
    cmd_run,
    cmd_seeds,
    cmd_verify,
)
from demofactory.cli.parser import build_parser
from demofactory.cli.robustness_cmds import cmd_calibrate, cmd_divergence
from demofactory.cli.seed_cmds import cmd_annotate, cmd_collect, cmd_script
from demofactory.cli.spec_cmds import cmd_spec_help, cmd_validate
from demofactory.cli.train_cmds import cmd_train_eval
from demofactory.errors import USER_FACING_ERRORS

COMMANDS = {
    "validate": cmd_validate,
    "spec-help": cmd_spec_help,
    "annotate": cmd_annotate,
    "run": cmd_run,
    "preview": cmd_preview,
    "export": cmd_export,
    "verify": cmd_verify,
    "inspect": cmd_inspect,
    "divergence": cmd_divergence,
    "seeds": cmd_seeds,
    "train-eval": cmd_train_eval,
    "script": cmd_script,
    "collect": cmd_collect,
    "calibrate": cmd_calibrate,
}


# What an interrupted command (Ctrl-C, SIGTERM) leaves: each writes its outputs through a
# temporary name (demofactory.outputs), so only `run`, which keeps each shard it finished,
# resumes.


READ_ONLY = "nothing was written"


INTERRUPTED = {
    "run": "finished shards are kept; run the same command again to resume",
    "seeds": "--out holds no manifest yet (written last); run the same command again",
    "export": "OUT was not written (an export is renamed into place only once whole); "
    "the dataset is unchanged",
    "script": "--out was not written (the demos are saved only once all are recorded)",
    "collect": "--out was not written (the demos are saved only once all are recorded)",
    "calibrate": "--out and --report were not written",
    "train-eval": "--out and --save-policy were not written",
    "divergence": "the dataset is unchanged (scores are written only once all are computed)",
    "preview": "pictures already finished are kept in the preview folder; the dataset is unchanged",
    "validate": "the spec is unchanged; --still keeps the pictures already finished",
    "annotate": "the spec is unchanged; --plot keeps the timelines already finished",
}


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: what finished is kept (Ray's own handler aborts the driver)."""


# received: the exit code says which, whatever re-raised the interrupt on the way


_signals: list[int] = []


def _terminate(signum, frame) -> None:
    _signals.append(signum)
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    import signal

    args = build_parser().parse_args(argv)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return _main(args)
    finally:
        # main() called in-process (tests): leave the caller's handler as it was
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(args) -> int:
    """Run the command; the one place where errors become what the user sees.

    Every user-facing error (`demofactory.errors.USER_FACING_ERRORS`: factory's, the dataset
    format's, the cluster's, the generators') is one `error: ...` line on stderr, exit 2.
    """
    # `export --actions` other than the shards' own deltas replays each relabeling in an env
    relabels = args.command == "export" and any(
        name.strip() not in ("", "delta_eef")
        for value in getattr(args, "actions", None) or ()
        for name in value.split(",")
    )
    never_step = ("verify", "inspect", "export", "preview", "spec-help")
    if args.command not in never_step or relabels:  # those never step MuJoCo
        from demofactory.simulation.mujoco_log import route_mujoco_warnings

        route_mujoco_warnings()
    if args.command not in ("verify", "inspect", "export", "spec-help") or relabels:  # no env
        from demofactory.robots import (
            repairs as robot_repairs,  # robosuite: only for the verbs that build envs
        )

        robot_repairs.install()  # before any env is built (preview: --failures re-renders)
    try:
        return COMMANDS[args.command](args)
    except USER_FACING_ERRORS as err:
        print(f"error: {_shown(user_message(err))}", file=sys.stderr)
        return 2
    except SystemExit as err:
        import signal

        if err.code != signal.SIGTERM:
            raise
        # ray.init's own SIGTERM handler (`sys.exit(signum)`), in force while it starts Ray:
        # the same SIGTERM, so the same line and exit code as in every other phase.
        print(f"interrupted: {INTERRUPTED.get(args.command, READ_ONLY)}", file=sys.stderr)
        return 143
    except KeyboardInterrupt as err:
        print(f"interrupted: {INTERRUPTED.get(args.command, READ_ONLY)}", file=sys.stderr)
        return 143 if isinstance(err, Terminated) or _signals else 130
    except BrokenPipeError:  # `factory inspect DIR | head`: the reader left; not an error
        _silence_stdout()
        return 141  # what a shell reports for a process ended by SIGPIPE (128 + 13)
    except OSError as err:  # a file the checks above missed: still one line, not a traceback
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        text = (
            getattr(err, "strerror", None)
            or (str(err).strip().splitlines() or [type(err).__name__])[0]
        )
        print(f"error: {_shown(f'{where}{text}')}", file=sys.stderr)
        return 2


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush does not fail again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout replaced by an object without a descriptor (tests)
        pass
    finally:
        os.close(devnull)


def user_message(err: BaseException) -> str:
    """A user-facing error's text on one line (a Ray task error's: what the worker raised)."""
    cause = getattr(err, "cause", None)  # ray.exceptions.RayTaskError wraps the worker's error
    if isinstance(cause, USER_FACING_ERRORS):
        err = cause
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    text = " ".join(lines) if lines else type(err).__name__
    return _as_given(text)


if __name__ == "__main__":
    sys.exit(main())
