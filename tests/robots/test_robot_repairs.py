"""The robots' repairs (demofactory.robots.repairs): one table, one explicit idempotent install, and
no
env built before it (make_env refuses)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from demofactory.robots import arm_fixes, gripper_fixes
from demofactory.robots import repairs as robot_repairs

REPO = Path(__file__).resolve().parents[2]


def test_install_applies_every_repair_once_and_a_second_call_changes_nothing():
    from robosuite.models.grippers import GRIPPER_MAPPING
    from robosuite.models.robots.robot_model import REGISTERED_ROBOTS

    names = robot_repairs.install()
    assert names == tuple(r.name for r in robot_repairs.REPAIRS)
    assert {r.install for r in robot_repairs.REPAIRS} == {arm_fixes.install, gripper_fixes.install}
    assert robot_repairs.installed()
    robots, grippers = dict(REGISTERED_ROBOTS), dict(GRIPPER_MAPPING)
    assert robot_repairs.install() == names
    assert dict(REGISTERED_ROBOTS) == robots and dict(GRIPPER_MAPPING) == grippers  # same objects
    broken, repaired = gripper_fixes._closed_loop_class()
    assert broken not in GRIPPER_MAPPING.values() and repaired in GRIPPER_MAPPING.values()
    assert getattr(REGISTERED_ROBOTS["IIWA"], "_factory_repaired", False)


def test_building_an_env_before_the_install_is_refused_and_importing_installs_nothing():
    # A fresh process: importing the adapter changes no registry; make_env says what to call.
    code = (
        "from robosuite.models.robots.robot_model import REGISTERED_ROBOTS\n"
        "from demofactory.simulation.scene import make_env\n"
        "from demofactory.specs.spec import TaskSpec\n"
        "assert not getattr(REGISTERED_ROBOTS['IIWA'], '_factory_repaired', False)\n"
        "try:\n"
        "    make_env(TaskSpec(env='Lift', robot='Panda'))\n"
        "except RuntimeError as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert "call demofactory.robots.repairs.install()" in out.stdout, out.stdout + out.stderr
