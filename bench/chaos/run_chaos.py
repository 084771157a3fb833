#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chaos harness: a real multi-node elastic ddprun job (torch gloo workers training with
checkpoints, heartbeats, side clients on the store) takes N faults from a seeded schedule, one
after another and sometimes overlapping, and after each fault and at the end the invariants are
checked: progress or a clean end within a bound, the right exit code and root cause, every
acknowledged store write read back, nothing left behind, bounded agents. docs/reliability.md says
what each fault and bound is and holds the figures.

  run_chaos.py --build DIR --seed S --faults N [--nodes K] [--mode etcd|c10d]
               [--topology auto|netns|loopback] [--json OUT] [--md OUT] [--replay SCHEDULE.json]
               [--schedule-out PATH] [--types a,b,...]

Exit status: 0 no violation, 1 violations (listed, with the seed, the fault index, the schedule so
far and the evidence), 2 bad usage, 77 the job cannot run here (no torch, no ddprun)."""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checkpoints as ckpts  # noqa: E402
import episode_tags  # noqa: E402
import invariants as inv  # noqa: E402
import report  # noqa: E402
import schedule as sched  # noqa: E402
import topology as topo  # noqa: E402
import job  # noqa: E402
from job import Episode  # noqa: E402

# From a fault (after its own duration) to training again: the failure noticed (at most the
# heartbeat timeout, or the hang timeout), a re-form, and every rank importing torch again and
# meeting its peers (8 ranks on 2 cores: ~10-25 s here).
RESTART_BOUND = 75
END_BOUND = 45  # from the SIGTERM that ends an episode to every agent gone
BOUNDS = {"rss_kib": 300 * 1024, "fds": 512, "threads": 64}


def recovery_bound(fault, hang_timeout):
    extra = hang_timeout if fault["type"] in ("hang", "worker_stop") else 0
    held = fault["duration"] if fault["type"] in ("worker_stop", "agent_stop", "store_host_stop",
                                                  "link_cut", "etcd_stop", "console_stall",
                                                  "etcd_black_hole", "etcd_5xx") else 0
    return held + extra + RESTART_BOUND


class Harness:
    def __init__(self, args):
        self.args = args
        self.ddprun = os.path.abspath(args.ddprun)
        self.seed, self.nodes, self.mode = args.seed, args.nodes, args.mode
        self.launcher = args.launcher
        self.hang_timeout = args.hang_timeout
        # Warm starts where this ddprun has them (docs/warm-start.md): restarts then cost a
        # fork, not an import of torch.
        self.preload = []
        if args.launcher == "ddprun" and args.preload != "off":
            helptext = subprocess.run([self.ddprun, "--help"], capture_output=True, text=True).stdout
            if "--preload" in helptext:
                self.preload = ["--preload", job.PRELOAD]
            elif args.preload == "on":
                raise SystemExit("chaos: this ddprun has no --preload")
        self.tmp = tempfile.mkdtemp(prefix="ddprun_chaos_")
        self.topology, why = topo.make(args.nodes, args.topology)
        self.notes = []
        if why:
            self.notes.append(f"topology: loopback addresses, not network namespaces ({why})")
        self.etcd = None
        if self.mode == "etcd":
            from etcd_cluster import EtcdCluster
            self.etcd = EtcdCluster(self.topology.service_addr, self.topology.service_prefix())
            self.etcd_down = set()
        self.last_step_at = 0.0
        self.lock = threading.Lock()
        self.timers = []  # (due, action)
        self.usage_max = {}  # agent name -> [rss, fds, threads]
        self.next_sample = 0.0
        self.violations = []
        self.results = []  # one per fault
        self.episodes = []
        self.exit_codes = []
        self.pinned_exit = None  # a replay's expect_exit
        self.checkpoints_checked = 0

    # --- time and observation -------------------------------------------------------------
    def step_seen(self, when):
        with self.lock:
            self.last_step_at = max(self.last_step_at, when)

    def later(self, delay, action):
        self.timers.append((time.monotonic() + delay, action))

    def pump(self):
        now = time.monotonic()
        due = [t for t in self.timers if t[0] <= now]
        self.timers = [t for t in self.timers if t[0] > now]
        for _, action in due:
            action()
        if now >= self.next_sample:
            self.next_sample = now + 1.0
            for ep in self.episodes[-1:]:
                for a in ep.live():
                    use = inv.proc_usage(a.proc.pid)
                    if use:
                        top = self.usage_max.setdefault(a.name, [0, 0, 0])
                        for k in range(3):
                            top[k] = max(top[k], use[k])

    def wait(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump()
            if predicate():
                return True
            time.sleep(0.05)
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}")

    def free_port(self, slot):
        if self.topology.kind == "netns":
            code = (f"import socket;s=socket.socket();s.bind(('{self.topology.addr(slot)}',0));"
                    "print(s.getsockname()[1])")
            return int(subprocess.run([*self.topology.prefix(slot), sys.executable, "-c", code],
                                      capture_output=True, text=True, check=True).stdout)
        s = socket.socket()
        s.bind((self.topology.addr(slot), 0))
        port = s.getsockname()[1]
        s.close()
        return port

    def violation(self, kind, fault, text, schedule):
        self.violations.append({
            "seed": self.seed, "kind": kind, "fault_index": fault["index"] if fault else None,
            "fault_type": fault["type"] if fault else None, "evidence": text,
            "schedule_so_far": schedule[: (fault["index"] + 1) if fault else len(schedule)],
        })
        print(f"chaos: VIOLATION {kind} at fault {fault['index'] if fault else '-'}: {text}",
              file=sys.stderr, flush=True)

    # --- faults ---------------------------------------------------------------------------
    def inject(self, ep, fault):
        """Does FAULT to EP; returns a short text of what was done, or None when it had no
        target (it then counts as skipped)."""
        kind, pick, dur = fault["type"], fault["pick"], fault["duration"]
        live = ep.live()
        host = ep.store_host()
        non_host = [a for a in live if a is not host]

        def choose(items):
            return items[pick % len(items)] if items else None

        def stop_for(pid, what):
            if not job.signal_pid(pid, signal.SIGSTOP):
                return None
            ep.stopped.add(pid)

            def cont():
                job.signal_pid(pid, signal.SIGCONT)
                ep.stopped.discard(pid)
            self.later(dur, cont)
            return f"SIGSTOP {what} pid {pid} for {dur}s"

        if kind in ("worker_kill", "worker_stop"):
            workers = sorted((pid, a.name) for a in live for pid in a.workers())
            w = choose(workers)
            if not w:
                return None
            if kind == "worker_kill":
                return f"SIGKILL worker pid {w[0]} of {w[1]}" if job.signal_pid(w[0], signal.SIGKILL) else None
            return stop_for(w[0], f"worker of {w[1]}")
        if kind in ("agent_kill", "agent_stop"):
            a = choose(non_host)
            if not a:
                return None
            if kind == "agent_kill":
                return f"SIGKILL agent {a.name}" if job.signal_pid(a.proc.pid, signal.SIGKILL) else None
            return stop_for(a.proc.pid, f"agent {a.name}")
        if kind in ("store_host_kill", "store_host_stop"):
            if not host:
                return None
            if kind == "store_host_kill":
                return f"SIGKILL store host {host.name}" if job.signal_pid(host.proc.pid, signal.SIGKILL) else None
            return stop_for(host.proc.pid, f"store host {host.name}")
        if kind in ("zygote_kill", "zygote_stop"):
            # The preloaded interpreter: the agent's child that runs the zygote's program and
            # was never one of its workers (forked workers run the same command line).
            found = []
            for a in live:
                started = {e["pid"] for e in a.events_of("worker_start")}
                for pid in job.children(a.proc.pid):
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            if b"<ddprun-zygote>" in f.read() and pid not in started:
                                found.append((pid, a.name))
                    except OSError:
                        pass
            z = choose(sorted(found))
            if not z:
                return None
            if kind == "zygote_kill":
                return (f"SIGKILL zygote pid {z[0]} of {z[1]}"
                        if job.signal_pid(z[0], signal.SIGKILL) else None)
            return stop_for(z[0], f"zygote of {z[1]}")
        if kind == "link_cut":
            a = choose(live)
            if not a:
                return None
            self.topology.cut(a.slot)
            self.later(dur, lambda: self.topology.restore(a.slot))
            return f"link of node{a.slot} ({a.name}) down for {dur}s"
        if kind == "late_node":
            free = [s for s in range(self.nodes) if s not in ep.agents or not ep.agents[s].alive()]
            if self.mode == "c10d":
                free = [s for s in free if s != 0]  # slot 0's address is the c10d endpoint
            slot = choose(free)
            if slot is None:
                return None
            a = ep.start_agent(slot)
            return f"late node {a.name}"
        if kind in ("hang", "daemon"):
            a = choose(live)
            if not a:
                return None
            local = pick % job.NPROC
            open(os.path.join(ep.dir, "ctl", f"node{a.slot}.local{local}.{kind}"), "w").close()
            return f"{kind} on {a.name} local rank {local}"
        if kind == "stranger":
            targets = []
            if ep.direct_store:
                targets.append(("store", ep.direct_store))
            elif host:
                targets.append(("store", f"{self.topology.addr(host.slot)}:"
                                         f"{(host.events_of('store') or [{}])[-1].get('port', 0)}"))
            a = choose(live)
            if a and a.status_port():
                targets.append(("status", f"{self.topology.addr(a.slot)}:{a.status_port()}"))
            for what, addr in targets:
                subprocess.run([*self.topology.prefix(a.slot if a else 0), sys.executable,
                                os.path.join(HERE, "stranger.py"), what, addr, str(pick)],
                               capture_output=True, timeout=30)
            return f"stranger against {', '.join(f'{w} {t}' for w, t in targets)}" if targets else None
        if kind == "console_stall":
            a = choose(live)
            if not a:
                return None
            a.stall_until = time.monotonic() + dur
            return f"console of {a.name} not read for {dur}s"
        if kind in ("etcd_black_hole", "etcd_5xx"):
            up = [k for k in range(3) if self.etcd.alive(k) and k not in self.etcd_down]
            k = choose(up)
            if k is None:
                return None
            self.etcd_down.add(k)
            self.etcd.set_front(k, "hole" if kind == "etcd_black_hole" else "503")

            def heal():
                self.etcd.set_front(k, "pass")
                self.etcd_down.discard(k)
            self.later(dur, heal)
            return (f"etcd member e{k} {'black-holed' if kind == 'etcd_black_hole' else 'answering 503'}"
                    f" for {dur}s")
        if kind == "etcd_compact":
            status = self.etcd.ctl("endpoint", "status", "-w", "json")
            try:
                revision = max(int(st["Status"]["header"]["revision"])
                               for st in json.loads(status.stdout or "[]"))
            except (ValueError, KeyError):
                return None
            if self.etcd.ctl("compact", str(revision)).returncode != 0:
                return None
            return f"etcd compacted at revision {revision}"
        if kind in ("etcd_kill", "etcd_leader_kill", "etcd_stop"):
            up = [k for k in range(3) if self.etcd.alive(k) and k not in self.etcd_down]
            if kind == "etcd_leader_kill":
                leader = self.etcd.leader()
                k = leader if leader in up else None
            else:
                k = choose(up)
            if k is None:
                return None
            self.etcd_down.add(k)
            if kind == "etcd_stop":
                self.etcd.signal(k, signal.SIGSTOP)

                def resume():
                    self.etcd.signal(k, signal.SIGCONT)
                    self.etcd_down.discard(k)
                self.later(dur, resume)
                return f"SIGSTOP etcd member e{k} for {dur}s"
            self.etcd.kill(k)

            def restart():
                self.etcd.start(k)
                self.etcd_down.discard(k)
            self.later(dur, restart)
            return f"SIGKILL etcd member e{k}{' (leader)' if kind == 'etcd_leader_kill' else ''}"
        raise ValueError(kind)

    # --- the run ------------------------------------------------------------------------------
    def start_episode(self):
        ep = Episode(self, len(self.episodes))
        self.episodes.append(ep)
        return ep

    def await_training(self, ep, since, bound):
        """Until a step line arrives after SINCE, or every agent of EP ended. Returns
        ('recovered', t) or ('ended', t); raises TimeoutError."""
        result = {}

        def done():
            if self.last_step_at > since:
                result["r"] = ("recovered", self.last_step_at)
            elif ep.ended():
                result["r"] = ("ended", time.monotonic())
            return bool(result)
        self.wait(done, max(bound - (time.monotonic() - since), 1), "training again or a clean end")
        return result["r"]

    def end_episode(self, ep, schedule, fault):
        """Checks an episode that ended (or ends it): exit codes and root causes, the side
        clients' histories, nothing left."""
        if not ep.ended():
            ep.terminate()
            try:
                self.wait(ep.ended, END_BOUND, "every agent to end after SIGTERM")
            except TimeoutError:
                self.violation("hang", fault, "agents still running "
                               f"{[a.name for a in ep.live()]} {END_BOUND}s after SIGTERM", schedule)
                for a in ep.live():
                    job.signal_pid(a.proc.pid, signal.SIGKILL)
        for pid in list(ep.stopped):
            job.signal_pid(pid, signal.SIGCONT)
        for a in ep.all_agents:
            a.proc.wait()
            a.reader.join(timeout=5)
            a.err.close()
            self.exit_codes.append(a.proc.returncode)
            if self.launcher == "torchrun":
                continue  # torchrun ends with 1 whatever the cause: its codes are reported only
            for text in inv.check_exit(a.name, a.proc.returncode, a.stderr_text(),
                                       ep.fault_types, ep.terminated, self.pinned_exit):
                self.violation("root_cause", fault, text, schedule)
        # The workers' keys live for one attempt: ddprun deletes them when the next round has
        # formed (docs/launcher.md); a writer still running then (on a node declared lost) sees
        # them gone. An attempt's end begins with the first of these events on any node.
        ends = sorted(e["time"] for a in ep.all_agents for kind in inv.ATTEMPT_END_EVENTS
                      for e in a.events_of(kind))
        for name in sorted(os.listdir(os.path.join(ep.dir, "history"))) if os.path.isdir(
                os.path.join(ep.dir, "history")) else []:
            for text in inv.check_history(os.path.join(ep.dir, "history", name), ends):
                self.violation("lost_write", fault, text, schedule)
        # Nothing lost in training: each checkpoint equals a fault-free run from the attempt's start.
        checked, bad = ckpts.check_episode(ep.dir)
        self.checkpoints_checked += checked
        for text in bad:
            self.violation("lost_checkpoint", fault, text, schedule)
        # Nothing left: give the orphan guards a moment (they act on their own agent's death).
        pids = [a.proc.pid for a in ep.all_agents]
        daemon_tag = episode_tags.daemon_name(ep.value)
        kept = [k for a in ep.all_agents for k in inv.kept_dirs(a.stderr_text())]
        tmpdirs = [a.tmpdir for a in ep.all_agents]

        def clean():
            return not (inv.leftover_processes(ep.tag, daemon_tag) or inv.leftover_cgroups(pids)
                        or inv.leftover_files(tmpdirs, kept))
        try:
            self.wait(clean, 10, "nothing left")
        except TimeoutError:
            left = (inv.leftover_processes(ep.tag, daemon_tag) + inv.leftover_cgroups(pids)
                    + inv.leftover_files(tmpdirs, kept))
            self.violation("leftover", fault, "; ".join(left[:10]), schedule)
            for entry in inv.leftover_processes(ep.tag, daemon_tag):
                job.signal_pid(int(entry.split()[1].rstrip(":")), signal.SIGKILL)
        for a in ep.all_agents:
            top = self.usage_max.get(a.name)
            if top and (top[0] > BOUNDS["rss_kib"] or top[1] > BOUNDS["fds"] or top[2] > BOUNDS["threads"]):
                self.violation("unbounded", fault, f"{a.name}: max rss {top[0]} KiB, fds {top[1]}, "
                               f"threads {top[2]} (bounds {BOUNDS})", schedule)

    def run(self, schedule):
        ep = self.start_episode()
        self.wait(lambda: self.last_step_at > 0 or ep.ended(), RESTART_BOUND + 30, "the first step")
        pending = []  # faults whose recovery is being awaited together (overlaps)
        for fault in schedule:
            if ep.ended():
                self.close_pending(pending, "ended", time.monotonic())
                self.end_episode(ep, schedule, ep.last_fault)
                started = time.monotonic()  # a step of the episode before, up to now, is not one
                ep = self.start_episode()
                try:
                    self.wait(lambda: self.last_step_at > started or ep.ended(),
                              RESTART_BOUND + 30, "the new episode's first step")
                except TimeoutError as e:
                    self.violation("stuck", fault, f"new episode {ep.id}: {e}", schedule)
            end_wait = time.monotonic() + fault["gap"]
            self.wait(lambda: time.monotonic() >= end_wait, fault["gap"] + 1, "the gap")
            did = self.inject(ep, fault)
            at = time.monotonic()
            entry = {"index": fault["index"], "type": fault["type"], "did": did, "episode": ep.id,
                     "outcome": None, "ttr": None, "at": at}
            self.results.append(entry)
            print(f"chaos: fault {fault['index']} {fault['type']}: {did or 'no target (skipped)'}",
                  flush=True)
            if did is None:
                entry["outcome"] = "skipped"
                continue
            ep.fault_types.append(fault["type"])
            ep.last_fault = fault  # what an episode's end is checked against
            pending.append((entry, fault))
            nxt = fault["index"] + 1
            if nxt < len(schedule) and schedule[nxt]["overlap"]:
                continue  # the next fault lands while this one is still being recovered from
            bound = max(recovery_bound(f, self.hang_timeout) for _, f in pending)
            since = max(e["at"] for e, _ in pending) + min(f["duration"] if f["type"] in (
                "worker_stop", "agent_stop", "store_host_stop", "link_cut", "console_stall")
                else 0 for _, f in pending) + 0.5
            try:
                outcome, t = self.await_training(ep, since, bound + (since - at))
                self.close_pending(pending, outcome, t)
            except TimeoutError as e:
                self.violation("stuck", fault, f"{e}; no step for {time.monotonic() - self.last_step_at:.1f}s; "
                               f"agents: {[(a.name, a.alive()) for a in ep.all_agents]}", schedule)
                self.close_pending(pending, "violated", None)
                ep.terminate()
        self.close_pending(pending, "ended" if ep.ended() else "recovered", time.monotonic())
        self.end_episode(ep, schedule, ep.last_fault)

    @staticmethod
    def close_pending(pending, outcome, t):
        for entry, _ in pending:
            entry["outcome"] = outcome
            entry["ttr"] = None if t is None else round(t - entry["at"], 3)
        pending.clear()

    def close(self):
        # A run cut short (SIGTERM, Ctrl-C, an error) must not leave its job behind: the last
        # episode's agents get SIGTERM, then SIGKILL after 15 s.
        for ep in self.episodes[-1:]:
            if not ep.ended():
                ep.terminate()
                deadline = time.monotonic() + 15
                while not ep.ended() and time.monotonic() < deadline:
                    time.sleep(0.2)
                for a in ep.live():
                    job.signal_pid(a.proc.pid, signal.SIGKILL)
        if self.etcd:
            self.etcd.close()
        self.topology.close()
        if self.args.keep or self.violations:  # the evidence: logs, events, histories, stacks
            print(f"chaos: the run's files are kept in {self.tmp}", file=sys.stderr, flush=True)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def summarize(h, schedule, elapsed):
    by_type = report.by_type(h.results, h.violations)
    return {"faults": len(schedule), "seed": h.seed, "mode": h.mode, "topology": h.topology.kind,
            "launcher": h.launcher, "preload": bool(h.preload),
            "nodes": h.nodes, "episodes": len(h.episodes), "seconds": round(elapsed, 1),
            "checkpoints_checked": h.checkpoints_checked,
            "notes": h.notes, "violations": h.violations, "by_type": by_type,
            "results": [{k: r[k] for k in ("index", "type", "did", "episode", "outcome", "ttr")}
                        for r in h.results],
            "exit_codes": {str(c): h.exit_codes.count(c) for c in sorted(set(h.exit_codes), key=str)},
            "bounds": {"recovery_s": {t: recovery_bound({"type": t, "duration": 6.0}, h.hang_timeout)
                                      for t in sorted(by_type)}, **BOUNDS},
            "max_usage": {"rss_kib": max((u[0] for u in h.usage_max.values()), default=0),
                          "fds": max((u[1] for u in h.usage_max.values()), default=0),
                          "threads": max((u[2] for u in h.usage_max.values()), default=0)}}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", help="a build directory (its bin/ddprun)")
    p.add_argument("--ddprun", help="the ddprun binary (instead of --build)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--faults", type=int, default=30)
    p.add_argument("--nodes", type=int, help="node slots (default 4, or the replay's)")
    p.add_argument("--mode", choices=["etcd", "c10d"], default="c10d")
    p.add_argument("--topology", choices=["auto", "netns", "loopback"], default="auto")
    p.add_argument("--types", default="", help="comma-separated fault types (default: all that apply)")
    p.add_argument("--json")
    p.add_argument("--md")
    p.add_argument("--replay")
    p.add_argument("--schedule-out")
    p.add_argument("--keep", action="store_true", help="keep the run's files (logs, histories)")
    p.add_argument("--launcher", choices=["ddprun", "torchrun"], default="ddprun",
                   help="torchrun: the same job and schedule under torchrun 2.15 (c10d only)")
    p.add_argument("--preload", choices=["auto", "on", "off"], default="auto",
                   help=f"ddprun --preload {job.PRELOAD} (auto: when this ddprun has it)")
    p.add_argument("--hang-timeout", type=float,
                   help="ddprun --hang-timeout (default 20, or the replay's)")
    args = p.parse_args()
    if args.launcher == "torchrun" and args.mode != "c10d":
        p.error("--launcher torchrun runs the c10d mode only")
    doc = None
    if args.replay:
        try:
            doc = sched.load(args.replay)
        except (OSError, ValueError, KeyError) as e:
            p.error(f"--replay: {e}")
        # The job the schedule was found on, unless the command line says otherwise.
        if args.nodes is None:
            args.nodes = doc.get("nodes")
        if args.hang_timeout is None:
            args.hang_timeout = doc.get("hang_timeout")
        if doc["mode"] != args.mode:
            p.error(f"{args.replay} is a {doc['mode']} schedule (--mode {doc['mode']})")
    args.nodes = 4 if args.nodes is None else args.nodes
    args.hang_timeout = 20.0 if args.hang_timeout is None else args.hang_timeout
    if args.nodes < job.INITIAL_NODES or args.nodes > 8:
        p.error(f"--nodes must be {job.INITIAL_NODES}..8")
    if not args.ddprun:
        if not args.build:
            p.error("--build DIR or --ddprun PATH is required")
        args.ddprun = os.path.join(args.build, "bin", "ddprun")
    if not os.access(args.ddprun, os.X_OK):
        print(f"chaos: SKIP: no ddprun at {args.ddprun}", file=sys.stderr)
        return 77
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode:
        print(f"chaos: SKIP: {sys.executable} has no torch", file=sys.stderr)
        return 77
    if args.mode == "etcd" and not shutil.which("etcd"):
        print("chaos: SKIP: etcd is not installed", file=sys.stderr)
        return 77
    # SIGTERM ends the run like Ctrl-C: through close(), which ends the job and its namespaces.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    h = Harness(args)
    try:
        if doc:
            schedule, h.seed = doc["faults"], doc["seed"]
            h.pinned_exit = doc.get("expect_exit")
            if "link_cut" in {f["type"] for f in schedule} and h.topology.kind != "netns":
                print(f"chaos: SKIP: {args.replay} cuts links: it needs network namespaces "
                      f"({'; '.join(h.notes)})", file=sys.stderr)
                return 77
        else:
            types = args.types.split(",") if args.types else sched.types_for(
                args.mode, h.topology.kind == "netns", bool(h.preload))
            unknown = [t for t in types if t not in sched.FAULT_TYPES]
            if unknown:
                p.error(f"unknown fault types: {unknown}")
            schedule = sched.generate(args.seed, args.faults, types)
        if args.schedule_out:
            sched.save(args.schedule_out, h.seed, args.mode, h.topology.kind == "netns", schedule,
                       nodes=args.nodes, hang_timeout=args.hang_timeout)
        for note in h.notes:
            print(f"chaos: {note}", flush=True)
        start = time.monotonic()
        h.run(schedule)
        summary = summarize(h, schedule, time.monotonic() - start)
    finally:
        h.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    md = report.markdown(summary)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)
    print(md)
    return 1 if summary["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
