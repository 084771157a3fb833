# SPDX-License-Identifier: MIT
"""A newcomer's first hour (issue 37 item 5, issue 36 item 6): --help that starts with the common
flags and fits 100 columns, `ddprun help`, help / man page / docs that agree, "did you mean" for
a mistyped flag or --rdzv_conf key, two unrelated c10d jobs on one endpoint under the default
--rdzv_id, and `top` with no job to look at. Real ddprun processes, no torch.
Usage: test_first_hour.py [test names]"""
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time

from harness import DDPRUN, Skip, clean_env, ddprun_lines, main, run, start, stop, wait_until

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

# The flags a first job needs: on the first screen of --help.
COMMON = ["--nproc-per-node", "--standalone", "--nnodes", "--node-rank", "--master-addr",
          "--master-port", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--max-restarts",
          "--module", "--no-python", "--log-dir", "--dry-run"]
FIRST_SCREEN = 40  # lines


def help_text():
    r = run(["--help"], timeout=20)
    assert r.rc == 0 and r.err == "", r
    return r.out


def read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- --help -------------------------------------------------------------------------------------

def test_help_fits_100_columns_and_starts_with_the_common_flags(tmp):
    text = help_text()
    lines = text.splitlines()
    wide = [l for l in lines if len(l) > 100]
    assert not wide, "lines over 100 columns:\n" + "\n".join(wide)
    first = "\n".join(lines[:FIRST_SCREEN])
    missing = [f for f in COMMON if not re.search(rf"^  (-\w, )?{f}\b", first, re.M)]
    assert not missing, f"not in the first {FIRST_SCREEN} lines: {missing}\n{first}"
    # "For example:", not "Examples:": help2man would move everything after that into EXAMPLES.
    examples = first.split("For example:\n", 1)[1].split("\n\n", 1)[0]
    assert len(re.findall(r"^  ddprun --", examples, re.M)) == 2, examples
    # The commands that look at a job, and the rest in groups.
    commands = text.split("Commands:\n", 1)[1].split("\n\n", 1)[0]
    for command in ("top", "report", "help"):
        assert re.search(rf"^  {command}\b", commands, re.M), commands
    headings = re.findall(r"^(\S[^\n]*):$", text, re.M)
    assert len(headings) >= 6 and headings[0] == "Common options", headings
    # Every option is somewhere, the rarer ones too.
    for flag in ("--hang-timeout", "--store-only", "--preload", "--events", "--monitor-interval",
                 "--print-completion", "--status-port", "-r, --redirects", "--version"):
        assert re.search(rf"^  {re.escape(flag)}\b", text, re.M), flag


def test_help_command_prints_the_help(tmp):
    text = help_text()
    r = run(["help"], timeout=20)
    assert r.rc == 0 and r.out == text and r.err == "", r
    for command in ("top", "report"):
        own = subprocess.run([DDPRUN, command, "--help"], capture_output=True, text=True,
                             timeout=20)
        r = run(["help", command], timeout=20)
        assert r.rc == 0 and r.out == own.stdout and f"ddprun {command}" in r.out, r
    r = run(["help", "tpo"], timeout=20)
    assert r.rc == 2 and "no command 'tpo'" in r.err and r.out == "", r


def test_help_man_page_and_completion_name_every_backend(tmp):
    text = help_text()
    line = next(l for l in text.splitlines() if l.startswith("  --rdzv-backend"))
    assert "etcd" in line and "c10d" in line and "static" in line, line
    r = run(["--print-completion", "bash"], timeout=20)
    assert r.rc == 0 and "static c10d etcd etcd-v2" in r.out, r.out[-2000:]
    assert "compgen -W 'top report help'" in r.out, r.out[-2000:]
    help2man = shutil.which("help2man")
    if not help2man:
        raise Skip("help2man is not installed")
    man = subprocess.run([help2man, "--no-info", "--version-string=0",
                          "--include=" + os.path.join(ROOT, "packaging", "man", "ddprun.h2m"),
                          DDPRUN], capture_output=True, text=True, timeout=60)
    assert man.returncode == 0, man.stderr
    page = man.stdout.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "")
    assert "static or c10d" not in page and re.search(r"c10d\s+or\s+etcd", page), page[:3000]
    for command in ("ddprun top", "ddprun report", "ddprun help"):
        assert command in page, command
    # The commands and every option group are subsections of the page's DESCRIPTION, none of
    # them swallowed by the EXAMPLES section.
    sections = re.findall(r"^\.S[HS] (.*)$", page, re.M)
    groups = [i for i, name in enumerate(sections) if name.endswith(':"')]
    assert '"Commands:"' in sections and '"Common options:"' in sections, sections
    assert groups and max(groups) < sections.index("EXAMPLES"), sections


# --- docs agree with the code -------------------------------------------------------------------

def test_docs_say_what_an_unknown_rdzv_conf_key_does(tmp):
    r = run(["--rdzv_conf", "colour=red", "--dry-run", "/bin/true"], timeout=20)
    assert r.rc == 0 and "unknown key 'colour' ignored" in r.err, r
    flags = read("docs", "flags.md")
    row = next(l for l in flags.splitlines() if l.startswith("| `--rdzv_conf"))
    assert "exit 2 |" not in row and "warning" in row, row
    readme = read("README.md")
    assert "unknown `--rdzv_conf` key is a warning" in readme


def test_readme_says_what_torchrun_2_15_does_with_master_port(tmp):
    """torchrun 2.15 on one node gives its workers a free port, not 29500 (run against torchrun
    itself in launcher.torch.torchrun_parity)."""
    row = next(l for l in read("README.md").splitlines() if "single-node `MASTER_PORT`" in l)
    assert "2.15: a free port" in row.split("|")[2], row


# --- did you mean -------------------------------------------------------------------------------

def test_a_mistyped_flag_names_the_closest_one(tmp):
    cases = [(["--nprco_per_node", "2"], "--nproc_per_node"),  # swapped letters, underscores
             (["--nproc-per-nodes", "2"], "--nproc-per-node"),  # one too many, dashes
             (["--stanalone"], "--standalone"),
             (["--max_restart", "1"], None)]  # an abbreviation: accepted, no error
    for args, suggestion in cases:
        r = run([*args, "--dry-run", "/bin/true"], timeout=20)
        if suggestion is None:
            assert r.rc == 0, r
            continue
        lines = ddprun_lines(r.err)
        assert r.rc == 2 and len(lines) == 1, r
        assert f"unknown option '{args[0]}'" in lines[0], lines
        assert f"did you mean {suggestion}?" in lines[0], lines
    r = run(["--store-only", "--stor-proxy", "on"], timeout=20)
    assert r.rc == 2 and "did you mean --store-proxy?" in r.err, r
    r = run(["--zzzzzz", "/bin/true"], timeout=20)
    assert r.rc == 2 and "did you mean" not in r.err, r


def test_a_mistyped_rdzv_conf_key_names_the_closest_one(tmp):
    for key, suggestion in (("join_timout", "join_timeout"), ("join-timeout", "join_timeout"),
                            ("hearbeat_timeout", "heartbeat_timeout"), ("colour", None)):
        r = run(["--rdzv_conf", f"{key}=5", "--dry-run", "/bin/true"], timeout=20)
        lines = ddprun_lines(r.err)
        assert r.rc == 0 and len(lines) == 1, r
        want = f"warning: --rdzv_conf: unknown key '{key}' ignored"
        if suggestion:
            want += f" (did you mean {suggestion}?)"
        assert lines[0] == "ddprun: " + want, lines


# --- two unrelated c10d jobs under the default --rdzv_id -----------------------------------------

WAITER = """
    import os, sys, time
    open(sys.argv[1], "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.05)
    """


def test_another_train_py_under_the_default_id_is_warned_at_once(tmp):
    """Job A (an elastic c10d job, room for a second node) runs project a's train.py; job B runs
    project b's train.py (the same file name, other content) on the same endpoint without
    --rdzv_id. B used to wait silently as A's spare until join_timeout (and, under a name-only
    fingerprint, was not told apart at all): it is warned at once, one line naming --rdzv_id.
    Only a warning: A keeps running, B is not refused."""
    for project in ("a", "b"):
        os.makedirs(os.path.join(tmp, project))
        with open(os.path.join(tmp, project, "train.py"), "w") as f:
            f.write(textwrap.dedent(WAITER) + f"# project {project}\n")
    port = free_port()
    go = os.path.join(tmp, "go")
    conf = "join_timeout=30,last_call_timeout=1"
    rdzv = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--nnodes", "1:2",
            "--nproc_per_node", "1", "--rdzv_conf", conf]
    a_started = os.path.join(tmp, "a.started")
    job_a = start([*rdzv, "--python", sys.executable, os.path.join(tmp, "a", "train.py"),
                   a_started, go])
    job_b = None
    try:
        wait_until(lambda: os.path.exists(a_started), 30, "job A's worker")
        b_err_path = os.path.join(tmp, "b.err")
        with open(b_err_path, "w") as b_err:
            job_b = start([*rdzv, "--python", sys.executable, os.path.join(tmp, "b", "train.py"),
                           os.path.join(tmp, "b.started"), go], stderr=b_err)

        def warned():
            with open(b_err_path) as f:
                return [l for l in ddprun_lines(f.read()) if "--rdzv_id" in l]
        wait_until(warned, 20, "job B's warning")
        line = warned()[0]
        assert "warning:" in line and "default --rdzv_id" in line and "train.py" in line, line
        assert job_a.poll() is None, "job A must keep running"
        assert job_b.poll() is None, "job B is warned, not refused"
    finally:
        open(go, "w").close()
        if job_b is not None:
            stop(job_b)
        try:
            job_a.wait(timeout=30)
        finally:
            stop(job_a)
    assert job_a.returncode == 0, job_a.stderr.read()


NODE_ARGS = """
    import sys
    assert sys.argv[1] == "--out"
    open(sys.argv[2], "w").close()
    """


def test_the_nodes_of_one_job_may_pass_their_own_arguments(tmp):
    """torchrun runs `a.py --out /scratch/node0` and `a.py --out /scratch/node1` on two nodes as
    one job; so does ddprun without --rdzv_id: no warning, both nodes exit 0. The second node
    reaches the script by another path (a symlink under another name): still the same program."""
    script = os.path.join(tmp, "a.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(NODE_ARGS))
    link = os.path.join(tmp, "link.py")
    os.symlink(script, link)
    port = free_port()
    rdzv = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--nnodes", "2",
            "--nproc_per_node", "1", "--rdzv_conf", "join_timeout=30"]
    nodes = [start([*rdzv, "--python", sys.executable, path, "--out",
                    os.path.join(tmp, f"node{i}")]) for i, path in enumerate((script, link))]
    try:
        outputs = [n.communicate(timeout=60) for n in nodes]
    finally:
        for n in nodes:
            stop(n)
    for n, (_, err) in zip(nodes, outputs):
        assert n.returncode == 0, err
        assert "--rdzv_id" not in err, err
    assert os.path.exists(os.path.join(tmp, "node0")) and os.path.exists(os.path.join(tmp, "node1"))


def test_a_mistyped_flag_never_echoes_its_value(tmp):
    r = run(["--rdzv_conff=token=s3cret", "/bin/true"], timeout=20)
    assert r.rc == 2 and "s3cret" not in r.err and "'--rdzv_conff'" in r.err, r


def test_a_very_long_mistyped_flag_is_answered_at_once(tmp):
    r = run(["--" + "-" * 120000, "/bin/true"], timeout=20)
    assert r.rc == 2 and r.elapsed < 5 and "did you mean" not in r.err, r


def test_top_with_no_job_says_so_with_the_documented_code(tmp):
    env = clean_env(XDG_RUNTIME_DIR=tmp)
    r = run(["top", "--once"], timeout=20, env=env)
    assert r.rc == 69 and "no running ddprun" in r.err, r
    health = read("docs", "health.md")
    assert re.search(r"No job found, or the job does not answer: one line, exit 69", health)
    r = run(["top", "--once", "not-an-endpoint"], timeout=20, env=env)
    assert r.rc == 2, r


if __name__ == "__main__":
    main(globals())
