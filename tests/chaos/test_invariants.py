#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""CTest `chaos.invariants`: the chaos harness's checks (bench/chaos/invariants.py, report.py) on
the evidence of real findings, so that a check that cannot fail is caught without a 3-minute job:
the 69-vs-74 end (docs/reliability.md), a lost node's writer after a re-form, a kept stacks
directory, the per-type table."""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

CHAOS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "chaos")
sys.path.insert(0, CHAOS_DIR)
import checkpoints as ckpts  # noqa: E402
import episode_tags  # noqa: E402
import invariants as inv  # noqa: E402
import report  # noqa: E402
import schedule as sched  # noqa: E402

LOSS_FAULTS = ["daemon", "agent_kill", "worker_kill", "agent_kill"]
ROOT_74 = ("ddprun: lost node 1 (10.78.193.3): 1 node left, fewer than the minimum of 2; stopping\n"
           "Root cause (whole job): lost node 1 (10.78.193.3): 1 node left\n")
ROOT_69 = "Root cause (whole job): rendezvous: the join timed out after 60 s (1 of 2 nodes)\n"


def history(ops):
    """A side client's history file from (op, arg, ret, t0) tuples, every one acknowledged."""
    f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
    for op, arg, ret, t0 in ops:
        f.write(json.dumps({"c": "direct", "op": op, "key": "/k", "arg": arg, "ok": True,
                            "ret": ret, "t0": t0, "t1": t0 + 0.01}) + "\n")
    f.close()
    return f.name


class ExitCodes(unittest.TestCase):
    def test_the_69_vs_74_finding_is_a_violation(self):
        found = inv.check_exit("ch1e0/node0#0", 69, ROOT_69, LOSS_FAULTS, False)
        self.assertEqual(len(found), 1)
        self.assertIn("exit 69, expected one of [74, 137]", found[0])

    def test_a_lost_node_named_is_right(self):
        self.assertEqual(inv.check_exit("n", 74, ROOT_74, LOSS_FAULTS, False), [])

    def test_the_code_without_its_root_cause_is_a_violation(self):
        self.assertEqual(len(inv.check_exit("n", 74, "FAILED\n", LOSS_FAULTS, False)), 1)

    def test_a_replay_pins_the_code(self):
        # 137 is a code worker_kill can explain, but the replay of this finding pins 74.
        sigkill = "Root cause: rank 1 failed with signal SIGKILL (9)\n"
        self.assertEqual(inv.check_exit("n", 137, sigkill, LOSS_FAULTS, False), [])
        self.assertEqual(len(inv.check_exit("n", 137, sigkill, LOSS_FAULTS, False, [74])), 1)
        self.assertEqual(inv.check_exit("n", 143, "", LOSS_FAULTS, True, [74]), [])

    def test_every_fault_type_has_its_codes(self):
        # A type without them made the harness itself crash (KeyError) at the end of the first
        # episode with a zygote fault (seed 35, --types zygote_kill,zygote_stop,worker_kill).
        self.assertEqual(set(inv.CODES_BY_FAULT), set(sched.FAULT_TYPES))

    def test_a_zygote_fault_ends_no_job(self):
        sigkill = "Root cause: rank 1 failed with signal SIGKILL (9)\n"
        faults = ["zygote_kill", "worker_kill", "zygote_stop"]
        self.assertEqual(inv.check_exit("n", 137, sigkill, faults, False), [])
        for code in (70, 1):
            self.assertEqual(len(inv.check_exit("n", code, "FAILED\n", faults[::2], False)), 1)

    def test_no_fault_no_failure(self):
        self.assertEqual(len(inv.check_exit("n", 75, "hung: no progress", [], False)), 1)
        self.assertEqual(len(inv.check_exit("n", None, "", [], False)), 1)


class Histories(unittest.TestCase):
    def test_a_counter_that_goes_back_is_a_lost_write(self):
        # The lost node's writer of tests/chaos/schedules/lost_node_writer_after_reform.json.
        path = history([("set", 95, None, 10.0), ("get", None, 95, 10.1), ("add", 1, 1, 10.2),
                        ("add", 1, 2, 10.3), ("add", 1, 1, 12.62)])
        found = inv.check_history(path)
        os.unlink(path)
        self.assertEqual(found, [f"{path}:5: add returned 1, expected 3"])

    def test_a_read_of_a_value_never_written(self):
        path = history([("set", 1, None, 1.0), ("get", None, 7, 1.1)])
        found = inv.check_history(path)
        os.unlink(path)
        self.assertEqual(len(found), 1)
        self.assertIn("get returned 7", found[0])

    def test_the_check_ends_with_the_clients_attempt(self):
        # Replayed: node_lost at 12.04, the add in flight from 12.10 to 12.11 returns 1, the
        # round's rendezvous event at 12.117.
        ops = [("add", 1, k + 1, 10.0 + k / 10) for k in range(5)] + [("add", 1, 1, 12.10)]
        path = history(ops)
        self.assertEqual(len(inv.check_history(path)), 1)
        self.assertEqual(inv.check_history(path, attempt_ends=[9.0, 12.04, 12.117]), [])
        self.assertEqual(inv.check_history(path, attempt_ends=[9.0, 12.105]), [])
        self.assertEqual(len(inv.check_history(path, attempt_ends=[9.0, 13.0])), 1)
        os.unlink(path)


class Leftovers(unittest.TestCase):
    def test_only_an_announced_directory_is_kept(self):
        with tempfile.TemporaryDirectory() as tmp:
            kept_run = os.path.join(tmp, "ddprun_ab12", "job_x")
            os.makedirs(kept_run)
            os.makedirs(os.path.join(tmp, "ddprun_cd34"))
            os.makedirs(os.path.join(tmp, "torchinductor_root"))
            stderr = f"ddprun: worker logs and stacks: {kept_run}\n"
            self.assertEqual(inv.leftover_files([tmp], inv.kept_dirs(stderr)),
                             [os.path.join(tmp, "ddprun_cd34")])
            self.assertEqual(len(inv.leftover_files([tmp])), 2)

    def test_an_episode_process_and_its_daemon_are_found(self):
        # A worker as job.py starts it (the episode's entry in its environment) leaves a daemon as
        # chaos_train.py does; the check must see both, and the daemon by its name alone.
        value = f"test-{os.getpid()}"
        worker = subprocess.Popen(
            [sys.executable, "-c", "import sys, time, episode_tags as t; t.spawn_daemon(sys.argv[1]); "
             "time.sleep(60)", value], cwd=CHAOS_DIR, env=dict(os.environ, **{episode_tags.VAR: value}))
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                found = inv.leftover_processes(episode_tags.env_entry(value), episode_tags.daemon_name(value))
                # (the forks between them carry the environment for a moment, not the name)
                if len(found) == 2 and any(episode_tags.daemon_name(value) in f for f in found):
                    break
                time.sleep(0.05)
            self.assertEqual(len(found), 2, found)
            self.assertTrue(any(f"pid {worker.pid}:" in f for f in found), found)
            daemon = [f for f in found if episode_tags.daemon_name(value) in f]
            self.assertEqual(len(daemon), 1, found)
            self.assertEqual(inv.leftover_processes("CHAOS_EPISODE=other", episode_tags.daemon_name(value)),
                             daemon)  # by its command line alone
            self.assertEqual(inv.leftover_processes(episode_tags.env_entry("other"), "chaos-daemon-other"), [])
        finally:
            worker.kill()
            worker.wait()
            for entry in inv.leftover_processes(episode_tags.env_entry(value), episode_tags.daemon_name(value)):
                os.kill(int(entry.split()[1].rstrip(":")), signal.SIGKILL)


class Checkpoints(unittest.TestCase):
    """checkpoints.check_episode on an episode written here: attempt 0 (world 2) saves steps 10 and
    20, attempt 1 (world 1, resumed from 20) saves 30."""

    def setUp(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        self.torch = torch
        self.dir = tempfile.mkdtemp()
        os.makedirs(os.path.join(self.dir, "ckpt"))
        self.out = [b"[rank0]:CHAOS START rank=0 world=2 restart=0 resume=0"]
        self.out += [b"[rank0]:CHAOS STEP step=%d restart=0 world=2" % s for s in range(1, 21)]
        self.out += [b"[rank1]:CHAOS START rank=1 world=1 restart=1 resume=20",  # not rank 0's
                     b"[rank0]:CHAOS START rank=0 world=1 restart=1 resume=20"]
        self.out += [b"[rank0]:CHAOS STEP step=%d restart=1 world=1" % s for s in range(21, 31)]
        for step in (10, 20):
            self.save(step, ckpts.replay(torch, None, 2, step))
        self.save(30, ckpts.replay(torch, self.load(20), 1, 10))

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def save(self, step, model):
        self.torch.save({"model": model}, os.path.join(self.dir, "ckpt", f"step_{step:06d}.pt"))

    def load(self, step):
        return self.torch.load(os.path.join(self.dir, "ckpt", f"step_{step:06d}.pt"))["model"]

    def check(self):
        with open(os.path.join(self.dir, "node0_0.out"), "wb") as f:
            f.write(b"\n".join(self.out) + b"\n")
        return ckpts.check_episode(self.dir, self.torch)

    def test_a_faithful_resume_passes(self):
        self.assertEqual(self.check(), (3, []))

    def test_a_checkpoint_from_the_wrong_start_or_world_is_found(self):
        self.save(30, ckpts.replay(self.torch, self.load(10), 1, 20))  # resumed from step 10
        checked, bad = self.check()
        self.assertEqual(checked, 3)
        self.assertEqual(len(bad), 1, bad)
        self.assertIn("step_000030.pt (attempt 1, world 1, resumed from step 20) differs", bad[0])
        self.save(30, ckpts.replay(self.torch, self.load(20), 2, 10))  # two ranks' batches
        self.assertEqual(len(self.check()[1]), 1)

    def test_a_step_with_two_authors_is_not_judged(self):
        # A node declared lost printed step 30 too before it was stopped: who saved it is unknown.
        self.out.append(b"[rank0]:CHAOS STEP step=30 restart=0 world=2")
        self.save(30, ckpts.replay(self.torch, self.load(10), 1, 20))
        self.assertEqual(self.check(), (2, []))


class Table(unittest.TestCase):
    def test_each_fault_counts_once(self):
        results = [{"index": 0, "type": "worker_kill", "outcome": "recovered", "ttr": 4.0},
                   {"index": 1, "type": "worker_kill", "outcome": "recovered", "ttr": 2.0},
                   {"index": 2, "type": "agent_kill", "outcome": "ended", "ttr": 1.0},
                   {"index": 3, "type": "hang", "outcome": "skipped", "ttr": None},
                   {"index": 4, "type": "agent_kill", "outcome": "violated", "ttr": None}]
        t = report.by_type(results, [{"fault_index": 2}])
        self.assertEqual((t["worker_kill"]["recovered"], t["worker_kill"]["ttr_p50"]), (2, 3.0))
        self.assertEqual((t["agent_kill"]["violated"], t["agent_kill"]["ended_correctly"]), (2, 0))
        self.assertEqual(t["hang"]["skipped"], 1)
        run = {"faults": 5, "seed": 1, "nodes": 3, "episodes": 1, "seconds": 10.0,
               "violations": [{}], "by_type": t, "exit_codes": {"74": 1}}
        merged = report.merge([run, run])
        self.assertEqual(merged["by_type"]["worker_kill"]["ttr"], [2.0, 2.0, 4.0, 4.0])
        self.assertEqual((merged["faults"], len(merged["violations"])), (10, 2))
        self.assertIn("| worker_kill | 4 | 0 | 4 | 0 | 0 | 3.0 | 4.0 | 4.0 |",
                      report.markdown(merged))


class Schedules(unittest.TestCase):
    def test_the_same_seed_gives_the_same_schedule(self):
        types = sched.types_for("c10d", True)
        self.assertEqual(sched.generate(26, 26, types), sched.generate(26, 26, types))
        self.assertNotEqual(sched.generate(26, 26, types), sched.generate(27, 26, types))

    def test_every_replay_file_loads(self):
        # schedules/open/: violations found and not yet fixed; soak/: fixed, kept as evidence
        # (chaos.slice replays neither).
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schedules")
        names = sorted(glob.glob(os.path.join(here, "*.json")) +
                       glob.glob(os.path.join(here, "open", "*.json")) +
                       glob.glob(os.path.join(here, "soak", "*.json")))
        self.assertTrue(names)
        for name in names:
            doc = sched.load(name)
            self.assertIn(doc["mode"], ("c10d", "etcd"), name)
            self.assertTrue(doc["faults"], name)


if __name__ == "__main__":
    unittest.main()
