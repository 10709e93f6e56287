#!/usr/bin/env python3
"""Reference makespans for SPASE instances from OR-Tools CP-SAT (benchmark only).

For every INSTANCE.json in DIR without a result yet, solves the instance exactly as the
instance format defines it (docs/solver.md) and writes INSTANCE.cpsat.json beside it:
{"makespan_s", "bound_s", "status", "wall_s", "cpu_s", "workers", "time_limit_s", ...}.

The model: per job, one optional fixed-size interval per (configuration, node) or, for a
configuration over k whole nodes, per k-subset of its eligible nodes, all sharing the job's
start; exactly one is present. Per node a cumulative of its devices (a whole-node
configuration takes every device of its nodes). Identical jobs start in index order (any
schedule can be relabelled so). Durations must be whole seconds: bench_solver writes its
generated instances so, and this script refuses others rather than round them (rounding
would make the reference solve another instance).

Saturn never needs this: OR-Tools is a benchmark peer. Install it into a virtual environment,
never with pip --user (user-site packages shadow the system's for every Python program of the
user): bench/solver/reference.sh creates BUILD_DIR/reference-venv when needed, or run this
script with an interpreter that has it (PYTHONPATH=... python3).
"""
import argparse
import itertools
import json
import os
import resource
import sys
import time


def fail(msg):
    print(f"cpsat_reference: {msg}", file=sys.stderr)
    sys.exit(2)


try:
    from ortools.sat.python import cp_model
    import ortools
except ImportError:
    fail("OR-Tools is not installed for this python3 ({}); install it into a venv for the "
         "benchmark: 'python3 -m venv VENV && VENV/bin/pip install ortools', then run this script "
         "with VENV/bin/python (bench/solver/reference.sh does it)".format(sys.executable))


def eligible(nodes, cfg):
    per_node = cfg["devices"] // cfg.get("nodes", 1)
    mem = cfg.get("memory_gib", 0.0)
    out = []
    for i, n in enumerate(nodes):
        node_mem = n.get("memory_gib", 0.0)
        if n["devices"] >= per_node and (node_mem <= 0 or mem <= 0 or mem <= node_mem * (1 + 1e-9)):
            out.append(i)
    return out if len(out) >= cfg.get("nodes", 1) else []


def solve(path, time_limit, workers, dtime):
    inst = json.load(open(path))
    nodes = inst["cluster"]["nodes"]
    jobs = inst["jobs"]
    m = cp_model.CpModel()
    # Alternatives per job: (duration, [(node, demand)]); dominated ones dropped (another no
    # slower whose every placement's demand is no bigger on the same nodes).
    alts = []
    for job in jobs:
        a = []
        for cfg in job["configs"]:
            t = cfg["time_s"]
            if abs(t - round(t)) > 1e-9 or t < 1:
                fail(f"{path}: job {job['id']}: time_s {t} is not a whole number of seconds")
            k = cfg.get("nodes", 1)
            if cfg["devices"] % k:
                continue
            el = eligible(nodes, cfg)
            if not el:
                continue
            if k == 1:
                for n in el:
                    a.append((int(round(t)), ((n, cfg["devices"]),)))
            else:
                for sub in itertools.combinations(el, k):
                    a.append((int(round(t)), tuple((n, nodes[n]["devices"]) for n in sub)))
        kept = []
        for i, (d, use) in enumerate(a):
            dominated = False
            for k2, (d2, use2) in enumerate(a):
                if k2 == i:
                    continue
                same_nodes = [n for n, _ in use2] == [n for n, _ in use]
                if not same_nodes:
                    continue
                le = d2 <= d and all(g2 <= g for (_, g2), (_, g) in zip(use2, use))
                strict = d2 < d or any(g2 < g for (_, g2), (_, g) in zip(use2, use))
                if le and (strict or k2 < i):
                    dominated = True
                    break
            if not dominated:
                kept.append((d, use))
        if not kept:
            fail(f"{path}: job {job['id']} has no configuration that fits the cluster")
        alts.append(kept)
    horizon = sum(min(d for d, _ in a) for a in alts)
    per_node = [[] for _ in nodes]
    starts, ends = [], []
    mk = m.NewIntVar(0, horizon, "makespan")
    for j, a in enumerate(alts):
        s = m.NewIntVar(0, horizon, f"s{j}")
        e = m.NewIntVar(0, horizon, f"e{j}")
        lits = []
        for i, (d, use) in enumerate(a):
            lit = m.NewBoolVar(f"x{j}_{i}")
            iv = m.NewOptionalFixedSizeIntervalVar(s, d, lit, f"iv{j}_{i}")
            for n, g in use:
                per_node[n].append((iv, g))
            m.Add(e == s + d).OnlyEnforceIf(lit)
            lits.append(lit)
        m.AddExactlyOne(lits)
        m.Add(mk >= e)
        starts.append(s)
        ends.append(e)
    for n, items in enumerate(per_node):
        if items:
            m.AddCumulative([iv for iv, _ in items], [g for _, g in items], nodes[n]["devices"])
    # Identical jobs: same configurations (ignoring ids), consecutive starts.
    key = lambda job: json.dumps(sorted(
        (c["devices"], c.get("nodes", 1), c["time_s"], c.get("memory_gib", 0.0))
        for c in job["configs"]))
    last = {}
    for j, job in enumerate(jobs):
        k = key(job)
        if k in last:
            m.Add(starts[last[k]] <= starts[j])
        last[k] = j
    m.Minimize(mk)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    if dtime > 0:
        solver.parameters.max_deterministic_time = dtime
    solver.parameters.num_workers = workers
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.time()
    status = solver.Solve(m)
    wall = time.time() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    out = {"status": solver.StatusName(status), "wall_s": wall, "cpu_s": cpu,
           "workers": workers, "time_limit_s": time_limit,
           "deterministic_limit": dtime, "deterministic_time": solver.deterministic_time, "ortools": ortools.__version__,
           "python": sys.executable, "load1": os.getloadavg()[0]}
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        out["makespan_s"] = solver.ObjectiveValue()
        out["bound_s"] = solver.BestObjectiveBound()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="directory of instance JSON files (bench_solver --write-instances)")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--workers", type=int, default=1, help="CP-SAT threads (default 1)")
    ap.add_argument("--deterministic", type=float, default=0.0,
                    help="also stop at this much CP-SAT deterministic time (its work measure, "
                    "about seconds of one core): results then do not depend on the machine's load")
    ap.add_argument("--redo", action="store_true", help="solve again where a result exists")
    ap.add_argument("--only", default="", help="comma-separated instance names")
    args = ap.parse_args()
    names = sorted(f[:-5] for f in os.listdir(args.dir)
                   if f.endswith(".json") and not f.endswith(".cpsat.json"))
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    for name in names:
        res = os.path.join(args.dir, name + ".cpsat.json")
        if os.path.exists(res) and not args.redo:
            continue
        r = solve(os.path.join(args.dir, name + ".json"), args.time_limit, args.workers,
                  args.deterministic)
        tmp = res + ".tmp"
        with open(tmp, "w") as f:
            json.dump(r, f, indent=1)
        os.replace(tmp, res)
        print(f"{name}: {r['status']} makespan {r.get('makespan_s')} bound {r.get('bound_s')} "
              f"wall {r['wall_s']:.1f} s cpu {r['cpu_s']:.1f} s dtime {r['deterministic_time']:.1f} "
              f"load {r['load1']:.2f}", flush=True)


if __name__ == "__main__":
    main()
