"""Physics only: N Stack worlds stepped at once by MuJoCo Warp against one CPU core of MuJoCo.

Prepare a trace here (robosuite builds the env; the OSC loop of demofactory.simulation.fast_step
runs a fixed action sequence and each control step's ctrl is kept), then time it anywhere that
has mujoco, mujoco-warp and warp-lang (no robosuite needed: benchmarks/device_check.sh):

    .venv/bin/python benchmarks/bench_batched.py --spec scene_specs/stack.yaml \\
        --save-trace .devdata/stack_trace.npz
    .venv/bin/python benchmarks/bench_batched.py --trace .devdata/stack_trace.npz \\
        --device cpu --worlds 1,4,16 --steps 4 [--osc]

Both ways replay the same controls from the same state: CPU MuJoCo `mj_step` on one MjData
(the reference, measured in the same run), and MuJoCo Warp stepping every world of a batch
together. The figure is world-steps per second and its ratio to the reference; an attempt is
the same number of physics steps both ways, so the ratio is also the attempts-per-second ratio
(physics only). Per world, ctrl is set once per control step; on CUDA the substeps of a
control step run as one captured CUDA graph. `--osc` adds, per batch size, the batched OSC
loop (BatchedOSC: the goals and the torques of every world recomputed on the device every
substep, as the CPU path does; the trace's actions), against the same physics-only reference.

The success rate of the batched attempt loop against the CPU backend, the same spec, shards
and seeds both ways in one run (demofactory.build.batched.run_batch; needs robosuite):

    .venv/bin/python benchmarks/bench_batched.py --spec scene_specs/stack.yaml \
        --success 16 --per-batch 8 --device cpu [--jobs 2 --log shards.jsonl]

The batch actor's host work a world and control step (the throughput model's h, and rho =
h / c against the CPU path's control step c), one batch run twice in one process: the attempts'
queries answered from the frames MuJoCo Warp computes, and through the CPU scene (the
reference: each world's state loaded with an mj_forward, the path before those frames):

    .venv/bin/python benchmarks/bench_batched.py --spec scene_specs/stack.yaml \
        --host-share 8 --device cpu

Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def save_trace(spec_path: Path, out: Path, control_steps: int = 50) -> dict:
    """The spec's compiled model (MJB), a start state after robosuite's first steps, and the
    ctrl the CPU OSC loop applies at every substep of `control_steps` fixed random actions."""
    import mujoco
    from demofactory.robots import repairs
    from demofactory.simulation.fast_step import FastStepper
    from demofactory.simulation.scene import Scene
    from demofactory.specs.spec import load_spec

    repairs.install()
    scene = Scene(load_spec(spec_path))
    scene.env.reset()
    fast = FastStepper(scene.env)
    rng = np.random.default_rng(0)
    for action in rng.uniform(-1, 1, (3, 7)):
        fast.step(action)
    model, data = fast.model, fast.data
    start = {k: getattr(data, k).copy() for k in ("qpos", "qvel", "act", "ctrl", "qacc_warmstart")}
    actions = rng.uniform(-0.3, 0.3, (control_steps, 7))
    actions[:, 6] = np.where(np.arange(control_steps) < control_steps // 2, 1.0, -1.0)
    ctrls: list = []
    for action in actions:
        fast.step(action, record=ctrls)
    mjb = np.zeros(mujoco.mj_sizeModel(model), dtype=np.uint8)
    mujoco.mj_saveModel(model, None, mjb)
    out.parent.mkdir(parents=True, exist_ok=True)
    from demofactory.simulation.mjwarp import ArmParams

    ctrl = np.array(ctrls).reshape(control_steps, fast.substeps, model.nu)
    np.savez_compressed(
        out,
        mjb=mjb,
        ctrl=ctrl,
        actions=actions,
        grip=ctrl[:, 0, fast.grip_act],  # the gripper's ctrl, as robosuite formatted it
        **ArmParams.from_stepper(fast).as_arrays(),
        time=np.array(data.time),
        **{f"start_{k}": v for k, v in start.items()},
    )
    return {"trace": str(out), "control_steps": control_steps, "substeps": fast.substeps}


def _temp():
    import tempfile

    return tempfile.mkstemp(suffix=".mjb")


def load_trace(path: Path):
    import mujoco

    z = np.load(path)
    fd, tmp = _temp()
    try:
        os.write(fd, z["mjb"].tobytes())
        model = mujoco.MjModel.from_binary_path(tmp)
    finally:
        os.close(fd)
        os.unlink(tmp)
    data = mujoco.MjData(model)
    for k in ("qpos", "qvel", "act", "ctrl", "qacc_warmstart"):
        getattr(data, k)[:] = z[f"start_{k}"]
    mujoco.mj_forward(model, data)
    return model, data, z["ctrl"]


def batched_osc(trace: Path, model, start, steps: int, nworld: int, device: str) -> dict:
    """World-steps per second of the batched OSC loop (demofactory.simulation.mjwarp.BatchedOSC:
    goals and torques for every world on the device, every substep), the trace's actions."""
    import warp as wp
    from demofactory.simulation.mjwarp import ArmParams, BatchedOSC, BatchedWorlds

    z = np.load(trace)
    arm = ArmParams.from_arrays(z)
    actions, grip = z["actions"], z["grip"]
    t0 = time.perf_counter()
    worlds = BatchedWorlds(model, start, nworld=nworld, device=device)
    osc = BatchedOSC(worlds, arm)

    def control(k: int) -> None:
        a = np.repeat(actions[k % len(actions)][None], nworld, axis=0)
        osc.control_step(a, np.repeat(grip[k % len(grip)][None], nworld, axis=0))

    control(0)  # compiles (or loads) the kernels
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    for k in range(steps):
        control(k + 1)
    wp.synchronize()
    took = time.perf_counter() - t0
    return {
        "worlds": nworld,
        "osc": True,
        "world_steps_per_s": steps * arm.substeps * nworld / took,
        "setup_s": round(setup, 2),
        "finite": bool(np.isfinite(worlds.qpos).all()),
    }


def cpu_reference(model, start, ctrl: np.ndarray, steps: int) -> float:
    """World-steps per second of CPU MuJoCo on one core: `steps` control steps of the trace."""
    import mujoco

    data = mujoco.MjData(model)
    mujoco.mj_copyData(data, model, start)
    substeps = ctrl.shape[1]
    t0 = time.perf_counter()
    for k in range(steps):
        data.ctrl[:] = ctrl[k % len(ctrl), 0]
        for _ in range(substeps):
            mujoco.mj_step(model, data)
    return steps * substeps / (time.perf_counter() - t0)


def batched(model, start, ctrl: np.ndarray, steps: int, nworld: int, device: str) -> dict:
    """World-steps per second of MuJoCo Warp, `nworld` worlds, after one warm-up control step
    (kernel compilation and graph capture are not timed; reported apart). mujoco_warp is
    called directly, as demofactory.simulation.mjwarp.BatchedWorlds does, so that this runs
    where only mujoco, mujoco-warp and warp-lang are installed (device_check.sh)."""
    import mujoco_warp as mjw
    import warp as wp

    wp.config.quiet = True
    substeps = ctrl.shape[1]
    t0 = time.perf_counter()
    with wp.ScopedDevice(device):
        wmodel = mjw.put_model(model)
        wdata = mjw.put_data(
            model,
            start,
            nworld=nworld,
            nconmax=max(64, 4 * start.ncon),
            njmax=max(256, 4 * start.nefc),
        )
        per_step = [
            wp.array(np.repeat(c[None].astype(np.float32), nworld, axis=0)) for c in ctrl[:, 0]
        ]

        def control(k: int) -> None:
            wp.copy(wdata.ctrl, per_step[k % len(per_step)])

        control(0)
        for _ in range(substeps):  # compiles (or loads) the kernels
            mjw.step(wmodel, wdata)
        wp.synchronize()
        graph = None
        if wp.get_device(device).is_cuda:
            try:
                with wp.ScopedCapture() as capture:
                    for _ in range(substeps):
                        mjw.step(wmodel, wdata)
                graph = capture.graph
            except Exception as err:  # noqa: BLE001 - reported; the plain loop is timed then
                print(f"graph capture failed ({err}); timing the plain loop", file=sys.stderr)
        wp.synchronize()
        setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        for k in range(steps):
            control(k)
            if graph is not None:
                wp.capture_launch(graph)
            else:
                for _ in range(substeps):
                    mjw.step(wmodel, wdata)
        wp.synchronize()
        took = time.perf_counter() - t0
        finite = bool(np.isfinite(wdata.qpos.numpy()).all())
    return {
        "worlds": nworld,
        "world_steps_per_s": steps * substeps * nworld / took,
        "setup_s": round(setup, 2),
        "graph": graph is not None,
        "finite": finite,
    }


def _shard_outcomes(spec_path: Path, shards: list, device: str, log: str | None) -> list:
    """[(shard, batched successes, CPU successes, [[batched, CPU] steps], batched s, CPU s)]
    for each (shard, attempt ids) of `shards`, in one process; each line also appended to
    `log` (JSON) as its shard ends, so a long run shows what it has so far."""
    from demofactory.build.batched import run_batch
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.robots import repairs
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    repairs.install()
    resolved = resolve_spec(load_spec(spec_path))
    worker = ShardWorker(resolved.spec, resolved.demos, resolved.scene)
    rows = []
    for shard, ids in shards:
        task = ShardTask(shard, tuple(ids))
        timing: dict = {}
        start = time.perf_counter()
        batch = run_batch(worker, task, device=device, timing=timing)
        took = time.perf_counter() - start
        start = time.perf_counter()
        reference = [worker.run_attempt(task, a) for a in task.attempt_ids]
        took_cpu = time.perf_counter() - start
        row = {
            "shard": shard,
            "batched": [bool(a.success) for a in batch],
            "cpu": [bool(a.success) for a in reference],
            "steps": [
                [len(a.actions), len(b.actions)] for a, b in zip(batch, reference, strict=True)
            ],
            # subtask retries taken (generation.subtask_retries), batched and CPU
            "retries": [
                [sum(a.retries), sum(b.retries)] for a, b in zip(batch, reference, strict=True)
            ],
            "batched_s": round(took, 1),
            "cpu_s": round(took_cpu, 1),
            "timing": timing,
        }
        rows.append(row)
        if log is not None:
            with open(log, "a") as f:
                f.write(json.dumps(row) + "\n")
    return rows


def success_rates(
    spec_path: Path,
    attempts: int,
    per_batch: int,
    device: str,
    jobs: int = 1,
    log: str | None = None,
) -> dict:
    """Success rate of the same attempts (same spec, shards and seeds) through the batched
    attempt loop (demofactory.build.batched.run_batch, MuJoCo Warp on `device`) and through the
    CPU path (ShardWorker.run_attempt), one run; the attempts in shards of `per_batch`, the
    shards dealt round-robin to `jobs` processes (warp's CPU device runs a kernel on one core;
    the shards and seeds are the same whatever `jobs` is)."""
    shards = [
        (shard, list(range(first, min(first + per_batch, attempts))))
        for shard, first in enumerate(range(0, attempts, per_batch))
    ]
    if jobs <= 1:
        rows = _shard_outcomes(spec_path, shards, device, log)
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            parts = pool.starmap(
                _shard_outcomes,
                [(spec_path, shards[j::jobs], device, log) for j in range(jobs)],
            )
        rows = sorted((row for part in parts for row in part), key=lambda r: r["shard"])
    ours = [x for r in rows for x in r["batched"]]
    cpu = [x for r in rows for x in r["cpu"]]
    lengths = [s for r in rows for s in r["steps"]]
    rate = {"batched": float(np.mean(ours)), "cpu": float(np.mean(cpu))}
    host = sum(r["timing"]["host_s"] for r in rows)
    world_steps = sum(r["timing"]["world_steps"] for r in rows)
    h = host / max(world_steps, 1)
    # the CPU path's own cost of a control step (physics and its attempt logic), same run
    step = sum(r["cpu_s"] for r in rows) / max(sum(c for r in rows for _, c in r["steps"]), 1)
    return {
        "spec": str(spec_path),
        "device": device,
        "attempts": attempts,
        "worlds_per_batch": per_batch,
        "jobs": jobs,
        "success_rate": {k: round(v, 4) for k, v in rate.items()},
        "points_apart": round(100 * (rate["batched"] - rate["cpu"]), 1),
        "same_outcome": int(sum(a == b for a, b in zip(ours, cpu, strict=True))),
        "retries": {
            "batched": sum(b for r in rows for b, _ in r["retries"]),
            "cpu": sum(c for r in rows for _, c in r["retries"]),
        },
        "mean_steps": {
            "batched": round(float(np.mean([x for x, _ in lengths])), 1),
            "cpu": round(float(np.mean([y for _, y in lengths])), 1),
        },
        "wall_s": {
            "batched": round(sum(r["batched_s"] for r in rows), 1),
            "cpu": round(sum(r["cpu_s"] for r in rows), 1),
            "batched_device": round(sum(r["timing"]["device_s"] for r in rows), 1),
            "batched_host": round(host, 1),
        },
        # the throughput model's h and rho (docs/cluster.md): the batch actor's host work per
        # world and control step, and that over the CPU path's whole control step
        "host_per_world_step_ms": round(1e3 * h, 4),
        "cpu_path_per_control_step_ms": round(1e3 * step, 4),
        "rho": round(h / step, 4),
    }


# What an attempt asks a WorldScene every control step: answered from the frames MuJoCo Warp
# computes (mjwarp.WorldFrames); without these methods, WorldScene's __getattr__ answers them
# from the CPU scene with the world's state loaded (an mj_forward), as before the frames.
DEVICE_QUERIES = ("eef_pose", "object_pose", "proprio", "holds", "success")


def host_share(spec_path: Path, attempts: int, device: str) -> dict:
    """The batch actor's host work per world and control step (h), one batch of `attempts`
    worlds run twice, the same seeds: its queries answered from the device's frames (today's
    path) and, the reference, every query loading the world's state into the CPU scene; and
    the CPU path's own control step (c) over the same attempts, for rho = h / c."""
    from demofactory.build import batched
    from demofactory.build.pipeline import ShardWorker
    from demofactory.build.records import ShardTask
    from demofactory.robots import repairs
    from demofactory.seeds.resolve import resolve_spec
    from demofactory.specs.spec import load_spec

    repairs.install()
    resolved = resolve_spec(load_spec(spec_path))
    worker = ShardWorker(resolved.spec, resolved.demos, resolved.scene)
    task = ShardTask(0, tuple(range(attempts)))

    def run(host_queries: bool) -> tuple[list, dict]:
        saved = {}
        if host_queries:
            for name in DEVICE_QUERIES:
                saved[name] = batched.WorldScene.__dict__[name]
                delattr(batched.WorldScene, name)
        timing: dict = {}
        try:
            return batched.run_batch(worker, task, device=device, timing=timing), timing
        finally:
            for name, method in saved.items():
                setattr(batched.WorldScene, name, method)

    ours, timing = run(host_queries=False)
    theirs, reference = run(host_queries=True)
    start = time.perf_counter()
    cpu = [worker.run_attempt(task, a) for a in task.attempt_ids]
    c = (time.perf_counter() - start) / sum(len(a.actions) for a in cpu)

    def h(t: dict) -> float:
        return t["host_s"] / max(t["world_steps"], 1)

    return {
        "spec": str(spec_path),
        "device": device,
        "worlds": attempts,
        "world_steps": [timing["world_steps"], reference["world_steps"]],
        "host_per_world_step_ms": {
            "device_frames": round(1e3 * h(timing), 4),
            "host_queries": round(1e3 * h(reference), 4),
        },
        "ratio": round(h(timing) / h(reference), 3),
        # simple predicates the device could not answer (a state load each), per world-step
        "host_leaves_per_world_step": round(
            timing["host_leaves"] / max(timing["world_steps"], 1), 5
        ),
        "cpu_path_per_control_step_ms": round(1e3 * c, 4),
        "rho": {
            "device_frames": round(h(timing) / c, 4),
            "host_queries": round(h(reference) / c, 4),
        },
        "successes": {
            "device_frames": sum(a.success for a in ours),
            "host_queries": sum(a.success for a in theirs),
            "cpu": sum(a.success for a in cpu),
        },
        "same_outcome": sum(a.success == b.success for a, b in zip(ours, theirs, strict=True)),
    }


def _named_geoms(model, prefixes: tuple[str, ...]) -> list[int]:
    """Collision geoms of the bodies whose names start with one of `prefixes`."""
    import mujoco

    out = []
    for g in range(model.ngeom):
        body = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, int(model.geom_bodyid[g])) or ""
        collides = model.geom_contype[g] or model.geom_conaffinity[g]
        if collides and body.startswith(prefixes):
            out.append(g)
    return out


def contacts_check(model, start, ctrl: np.ndarray, nworld: int, device: str, asks: int) -> dict:
    """The contact and distance predicates' device reads (mjwarp.WorldContacts) against CPU
    MuJoCo at the same joint positions: every world stepped through the trace's first control
    steps, then recomputed at its state now on both sides (mujoco_warp.forward, mj_forward).
    Reports the largest distance difference over the gripper's and the cubes' geom pairs,
    whether the contact pairs agree, and the time of one ask on the device against the host
    path's (an mj_forward and mj_geomDistance over the same pairs), `asks` times each."""
    import mujoco
    from demofactory.robots.geom_distance import surface_distance
    from demofactory.simulation.mjwarp import BatchedWorlds, WorldContacts

    worlds = BatchedWorlds(model, start, nworld=nworld, device=device)
    for k in range(min(len(ctrl), 20)):
        for c in ctrl[k]:
            worlds.set_ctrl(c)
            worlds.step(1)
    with worlds.warp.ScopedDevice(device):
        worlds.mjw.forward(worlds.wmodel, worlds.wdata)
        worlds.warp.synchronize()
    reads = WorldContacts(worlds)
    hand = frozenset(_named_geoms(model, ("gripper0",)))
    cubes = [frozenset(_named_geoms(model, (name,))) for name in ("cubeA", "cubeB")]
    if not hand or not all(cubes):
        raise SystemExit("--contacts needs a Stack trace (gripper0*, cubeA*, cubeB* bodies)")
    data = mujoco.MjData(model)
    qpos = worlds.qpos
    worst, agree = 0.0, True
    for w in sorted({0, nworld - 1}):
        data.qpos[:] = qpos[w]
        mujoco.mj_forward(model, data)
        for cube in cubes:
            for a in [frozenset({g}) for g in hand]:
                cpu = min(surface_distance(model, data, g, h, 1.0) for g in a for h in cube)
                worst = max(worst, abs(reads.distance(w, a, cube, 1.0) - cpu))
        n = data.ncon
        cpu_pairs = {tuple(sorted(x)) for x in data.contact.geom[:n].tolist()}
        device_pairs = {tuple(sorted(x)) for x in reads.contacts(w).tolist()}
        agree &= cpu_pairs == device_pairs
    start_t = time.perf_counter()
    for i in range(asks):
        reads.distance(i % nworld, hand, cubes[i % 2], 0.003)
        reads.contacts(i % nworld)
    device_ask = (time.perf_counter() - start_t) / asks
    start_t = time.perf_counter()
    for i in range(asks):
        data.qpos[:] = qpos[i % nworld]
        mujoco.mj_forward(model, data)
        min(surface_distance(model, data, g, h, 0.003 + 1e-6) for g in hand for h in cubes[i % 2])
    host_ask = (time.perf_counter() - start_t) / asks
    return {
        "worlds": nworld,
        "pairs_per_distance": len(hand) * len(cubes[0]),
        "distance_max_abs_diff_m": float(f"{worst:.3g}"),
        "contact_pairs_agree": bool(agree),
        "device_ask_ms": round(1e3 * device_ask, 4),
        "host_ask_ms": round(1e3 * host_ask, 4),
        "device_over_host": round(device_ask / host_ask, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, help="with --save-trace: the spec to trace")
    parser.add_argument("--save-trace", type=Path, help="write the trace (needs robosuite)")
    parser.add_argument("--trace", type=Path, help="time this trace")
    parser.add_argument("--device", default="cpu", help="warp device: cpu, cuda:0")
    parser.add_argument("--worlds", default="1,4,16", help="batch sizes, comma separated")
    parser.add_argument("--steps", type=int, default=4, help="control steps timed per batch")
    parser.add_argument("--cpu-steps", type=int, default=40, help="control steps, reference")
    parser.add_argument(
        "--osc",
        action="store_true",
        help="also time the batched OSC loop (BatchedOSC; needs demofactory importable)",
    )
    parser.add_argument(
        "--success",
        type=int,
        metavar="ATTEMPTS",
        help="with --spec: success rate of ATTEMPTS attempts, batched vs the CPU backend",
    )
    parser.add_argument("--per-batch", type=int, default=8, help="with --success: worlds a batch")
    parser.add_argument(
        "--jobs", type=int, default=1, help="with --success: processes the shards are dealt to"
    )
    parser.add_argument(
        "--log", help="with --success: append each shard's outcomes to this file (JSON lines)"
    )
    parser.add_argument(
        "--host-share",
        type=int,
        metavar="WORLDS",
        help="with --spec: the batch actor's host work a world and control step, one batch of "
        "WORLDS attempts, its queries from the device's frames vs through the CPU scene",
    )
    parser.add_argument(
        "--contacts",
        type=int,
        metavar="ASKS",
        help="with --trace: the contact and distance reads on the device vs CPU MuJoCo, and "
        "ASKS asks timed both ways (mjwarp.WorldContacts; needs demofactory importable)",
    )
    parser.add_argument("--plot", type=Path, help="with --trace: draw the sweep to this PNG")
    parser.add_argument("--plot-from", type=Path, help="draw --plot from a saved sweep JSON")
    args = parser.parse_args()
    if args.plot_from is not None:
        if args.plot is None:
            parser.error("--plot-from needs --plot")
        plot_sweep(json.loads(args.plot_from.read_text()), args.plot)
        return
    if args.host_share is not None:
        if args.spec is None:
            parser.error("--host-share needs --spec")
        print(json.dumps(host_share(args.spec, args.host_share, args.device)))
        return
    if args.success is not None:
        if args.spec is None:
            parser.error("--success needs --spec")
        rates = success_rates(
            args.spec, args.success, args.per_batch, args.device, args.jobs, args.log
        )
        print(json.dumps(rates))
        return
    if args.save_trace is not None:
        if args.spec is None:
            parser.error("--save-trace needs --spec")
        print(json.dumps(save_trace(args.spec, args.save_trace)))
        return
    if args.trace is None:
        parser.error("--trace (or --save-trace with --spec) is needed")
    from importlib import metadata

    import mujoco
    import warp as wp

    model, start, ctrl = load_trace(args.trace)
    if args.contacts is not None:
        rows = [
            contacts_check(model, start, ctrl, int(n), args.device, args.contacts)
            for n in args.worlds.split(",")
        ]
        print(json.dumps({"device": args.device, "contacts": rows}, indent=1))
        return
    reference = cpu_reference(model, start, ctrl, args.cpu_steps)
    rows = []
    for n in [int(x) for x in args.worlds.split(",")]:
        row = batched(model, start, ctrl, args.steps, n, args.device)
        row["ratio_vs_one_cpu_core"] = round(row["world_steps_per_s"] / reference, 3)
        row["world_steps_per_s"] = round(row["world_steps_per_s"], 1)
        rows.append(row)
        if args.osc:
            row = batched_osc(args.trace, model, start, args.steps, n, args.device)
            row["ratio_vs_one_cpu_core"] = round(row["world_steps_per_s"] / reference, 3)
            row["world_steps_per_s"] = round(row["world_steps_per_s"], 1)
            rows.append(row)
    result = {
        "device": args.device,
        "device_name": wp.get_device(args.device).name,
        "versions": {
            "mujoco": mujoco.__version__,
            "mujoco_warp": metadata.version("mujoco-warp"),
            "warp": wp.__version__,
        },
        "substeps_per_control_step": int(ctrl.shape[1]),
        "cpu_reference_world_steps_per_s": round(reference, 1),
        "batches": rows,
    }
    if args.plot is not None:
        try:
            plot_sweep(result, args.plot)
        except ImportError as err:  # a device machine without matplotlib: the JSON is enough
            print(f"no plot ({err}); draw it here with --plot-from", file=sys.stderr)
    print(json.dumps(result, indent=1))


def plot_sweep(result: dict, path: Path) -> None:
    """The batch-size curve as a picture: one device's world-steps per second over one CPU
    core's, against the batch size (log-log), one line for physics alone and one with the
    batched OSC loop when measured. Also drawn from a saved JSON: --plot-from."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for osc, label in ((False, "physics (mj_step of every world)"), (True, "with batched OSC")):
        rows = [r for r in result["batches"] if bool(r.get("osc")) == osc]
        if rows:
            ax.plot(
                [r["worlds"] for r in rows],
                [r["ratio_vs_one_cpu_core"] for r in rows],
                marker="o",
                label=label,
            )
    ax.axhline(50, color="grey", linestyle="--", linewidth=1, label="target 50x")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("worlds in a batch")
    ax.set_ylabel("world-steps/s over one CPU core")
    ax.set_title(f"Stack on MuJoCo Warp, {result['device_name']}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    from _common import run  # benchmarks/_common.py: --json-out PATH

    run(main)
