"""Every repair the factory makes to robosuite's robots: one table, installed by one call.

robosuite builds a robot's model from `REGISTERED_ROBOTS[name]` and its hand from
`GRIPPER_MAPPING[name]`. A repair swaps an entry for a subclass that fixes the model before it is
compiled (same name, same class as far as `isinstance` can tell):

    REPAIRS                 what it repairs (where the mechanics and measurements are)
      arm frame             a fixed-base arm's controller frame on a moving link: IIWA
                            (demofactory.robots.arm_fixes)
      Robotiq 85 linkage    the Robotiq 85's finger linkages cut open: UR5e's and Kinova3's
                            hand, robosuite issue #772 (demofactory.robots.gripper_fixes)

The gripper's closing sign is measured, not repaired (`demofactory.robots.gripper_sign`).

`install()` is the one step that applies them: explicit, idempotent, called by the entry points
before any env is built (`demofactory.cli.main` for the verbs that build envs, `ShardWorkerFactory`
in
each Ray actor, the tests' conftest, the benchmarks). `demofactory.simulation.scene.make_env` does
not apply
them; it refuses to build an env before they are installed, so no env is ever built from
robosuite's unrepaired models by accident. A new robot's repair is one more row in `REPAIRS`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from demofactory.robots import arm_fixes, gripper_fixes

# robosuite logs a page of warnings at import and per env (no private macro file, unused
# controller parts, optional robot packages); none is actionable for a factory user. A filter on
# its logger keeps its errors and drops the rest; it is set here, before robosuite is imported:
# the modules that import robosuite first (demofactory.simulation.scene, the CLI's verbs) import
# this one.
logging.getLogger("robosuite_logs").addFilter(lambda record: record.levelno >= logging.ERROR)


@dataclass(frozen=True)
class Repair:
    """One repair: its name, what it is for, and its idempotent install."""

    name: str
    fixes: str
    install: Callable[[], None]


REPAIRS: tuple[Repair, ...] = (
    Repair("arm frame", "IIWA's controller frame on its fixed base link", arm_fixes.install),
    Repair("Robotiq 85 linkage", "the Robotiq 85's finger linkages closed", gripper_fixes.install),
)

_installed = False


def install() -> tuple[str, ...]:
    """Apply every repair in `REPAIRS` to robosuite's registries (idempotent: a second call
    changes nothing); returns the names of the repairs, in order."""
    global _installed
    for repair in REPAIRS:
        repair.install()
    _installed = True
    return tuple(r.name for r in REPAIRS)


def installed() -> bool:
    """Whether `install()` has run in this process."""
    return _installed


def require_installed() -> None:
    """Raise unless `install()` has run: an env built before would use the broken models."""
    if not _installed:
        raise RuntimeError(
            "robosuite's robots are not repaired yet: call demofactory.robots.repairs.install() "
            "once, before building an env (the factory's CLI and Ray workers do)"
        )
