"""Per-arm subtasks: the checks that tie `subtasks[].arm`, `coordination` and `after` together.

    task.two_arm null ──► one arm, "right": no subtask names another, none is sequential
    task.two_arm set  ──► arms right, left: every subtask names one; per arm at most one subtask
                          ends at the task's success, and it is that arm's last; sequential
                          subtasks wait (`after`) on an earlier subtask by name; each arm has
                          as many coordinated subtasks as the other (they run in pairs by rank)

Pure data, like the rest of `load_spec`: `SceneSpec` raises the (field, message) pair found here
with its YAML path.
"""

from __future__ import annotations

from collections.abc import Sequence

from demofactory.specs.sections import ONE_ARM, TWO_ARMS, SubtaskSpec, TaskSpec


def arm_names(task: TaskSpec) -> tuple[str, ...]:
    """The arms the task's robot(s) have, in action order."""
    return TWO_ARMS if task.two_arm is not None else ONE_ARM


def robot_list(task: TaskSpec) -> list[str]:
    """The robots robosuite builds for `task`: task.robot once (one arm, or a two-armed robot
    in the single-robot configuration), or a pair of it (parallel, opposed)."""
    pair = task.two_arm is not None and task.two_arm.configuration != "single-robot"
    return [task.robot, task.robot] if pair else [task.robot]


def subtask_arm(task: TaskSpec, sub: SubtaskSpec) -> str:
    """The arm that does `sub` (a one-arm task's only arm when it names none)."""
    return sub.arm if sub.arm is not None else arm_names(task)[0]


def arms_problem(task: TaskSpec, subtasks: Sequence[SubtaskSpec]) -> tuple[str, str] | None:
    """(field, what was expected) for the first per-arm inconsistency, or None."""
    arms = arm_names(task)
    names: dict[str, int] = {}
    for i, sub in enumerate(subtasks):
        field = f"subtasks[{i}]"
        if sub.arm is not None and sub.arm not in arms:
            if task.two_arm is None:
                return f"{field}.arm", (
                    f"{task.robot} has one arm (right), got {sub.arm!r}; a second arm needs "
                    "task.two_arm (e.g. two_arm: {configuration: parallel})"
                )
            return f"{field}.arm", f"unknown arm {sub.arm!r} (expected one of: {', '.join(arms)})"
        if task.two_arm is not None and sub.arm is None:
            return f"{field}.arm", "a two-arm task: expected the arm that does it, right or left"
        if sub.name is not None:
            if sub.name in names:
                return f"{field}.name", f"{sub.name!r} is already subtasks[{names[sub.name]}]'s"
            names[sub.name] = i
        problem = _order_problem(task, subtasks, i, names)
        if problem:
            return problem
    return _per_arm_problem(task, subtasks)


def _order_problem(task, subtasks, i: int, earlier: dict[str, int]) -> tuple[str, str] | None:
    sub, field = subtasks[i], f"subtasks[{i}]"
    if sub.coordination != "sequential":
        if sub.after is not None:
            return f"{field}.after", (
                f"only a sequential subtask waits, this one is {sub.coordination}; expected "
                "coordination: sequential, or no after"
            )
        return None
    if task.two_arm is None:
        return f"{field}.coordination", (
            "one arm does every subtask in order already; sequential needs task.two_arm"
        )
    if sub.after is None:
        return f"{field}.after", "a sequential subtask waits: expected the name of an earlier one"
    if sub.after not in earlier or earlier[sub.after] == i:
        later = [j for j, s in enumerate(subtasks) if s.name == sub.after and j > i]
        what = f"a later subtask (subtasks[{later[0]}])" if later else "unknown"
        known = ", ".join(n for n, j in earlier.items() if j < i) or "none named"
        return f"{field}.after", (
            f"{sub.after!r} is {what}: expected an earlier subtask's name (earlier: {known})"
        )
    if subtasks[earlier[sub.after]].arm == sub.arm:
        return f"{field}.after", (
            f"{sub.after!r} is this arm's own earlier subtask, which it waits for anyway; "
            "expected a subtask of the other arm"
        )
    return None


def _per_arm_problem(task: TaskSpec, subtasks: Sequence[SubtaskSpec]) -> tuple[str, str] | None:
    """Per arm: one finishing subtask, its last; equal counts of coordinated subtasks."""
    coordinated = {}
    for arm in arm_names(task):
        mine = [i for i, s in enumerate(subtasks) if subtask_arm(task, s) == arm]
        if task.two_arm is not None and not mine:
            return "subtasks", f"the {arm} arm has no subtask; expected at least one per arm"
        finishing = [i for i in mine if subtasks[i].ends_when in (None, "success")]
        if task.two_arm is not None and finishing and finishing[0] != mine[-1]:
            return f"subtasks[{finishing[0]}].ends_when", (
                f"ends at the task's success, but the {arm} arm has later subtasks; expected "
                "the predicate that ends it (e.g. grasped(pot)), or move it last"
            )
        coordinated[arm] = [i for i in mine if subtasks[i].coordination == "coordinated"]
    counts = {arm: len(c) for arm, c in coordinated.items()}
    if task.two_arm is not None and len(set(counts.values())) > 1:
        fewer = min(counts, key=counts.get)
        more = max(counts, key=counts.get)
        return f"subtasks[{coordinated[more][counts[fewer]]}].coordination", (
            f"coordinated subtasks run in pairs, one per arm by rank: {more} has {counts[more]}, "
            f"{fewer} {counts[fewer]}; expected as many on each arm"
        )
    if task.two_arm is None and any(s.coordination == "coordinated" for s in subtasks):
        i = next(i for i, s in enumerate(subtasks) if s.coordination == "coordinated")
        return f"subtasks[{i}].coordination", "coordinated needs two arms (task.two_arm)"
    return None


# What the two-arm generator (demofactory.generators.bimanual) does not do yet: spec field ->
# (the value it takes, how to read it); anything else is refused rather than ignored.
TWO_ARM_ONLY = {
    "generation.source_selection": ("random", "one source demo per episode, drawn at random"),
    "generation.source_per": ("episode", "one source demo per episode"),
    "generation.start_from": ("current_pose", "bridges start at the arm's pose"),
    "generation.subtask_retries": (0, "no retries"),
    "generation.transit": ("direct", "interpolated bridges"),
    "generation.adr": (None, "no ADR"),
    "generation.robustness": (None, "no robustness replays"),
    "generation.rebalance": (None, "no rebalancing"),
    "physics": (None, "nominal physics"),
    "task.robots": (None, "one robot, paired"),
    "scene": (None, "a robosuite two-arm env; a scene: section takes single-robot only"),
}


def two_arm_problem(spec) -> tuple[str, str] | None:
    """(field, expected) for the first setting a two-arm spec (`task.two_arm`) cannot take yet,
    or a one-arm spec one only the two-arm generator draws."""
    if spec.task.two_arm is None:
        if spec.placement.joint_noise:
            return "placement.joint_noise", (
                "only the two-arm generator draws joint noise (task.two_arm); expected 0 on "
                "one arm, whose objects are placed instead (placement.objects)"
            )
        return None
    single = spec.task.two_arm.configuration == "single-robot"
    for dotted, (value, meaning) in TWO_ARM_ONLY.items():
        if dotted == "scene" and single:
            continue  # one robot: the scene env (one robot at the table) takes it as it is
        node = spec
        for part in dotted.split("."):
            node = getattr(node, part)
        if value is None and node not in (None, False):
            return dotted, f"not yet on two arms (task.two_arm): expected null ({meaning})"
        if value is not None and node != value:
            return dotted, (
                f"not yet on two arms (task.two_arm): expected {value!r} ({meaning}), got {node!r}"
            )
    if spec.symmetry:
        return "symmetry", "not yet on two arms (task.two_arm): expected none"
    return None
