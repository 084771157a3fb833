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


def test_an_unrelated_c10d_job_under_the_default_id_is_refused_at_once(tmp):
    """Job A (an elastic c10d job, room for a second node) runs; job B, another program on the
    same endpoint without --rdzv_id, used to wait as A's spare and end 69 after join_timeout.
    It is refused at once, naming --rdzv_id; a node of A itself (the same command) still joins."""
    script = os.path.join(tmp, "wait.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(WAITER))
    port = free_port()
    go = os.path.join(tmp, "go")
    conf = "join_timeout=30,last_call_timeout=1"
    rdzv = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--nnodes", "1:2",
            "--nproc_per_node", "1", "--rdzv_conf", conf]
    a_started = os.path.join(tmp, "a.started")
    job_a = start([*rdzv, "--python", sys.executable, script, a_started, go])
    try:
        wait_until(lambda: os.path.exists(a_started), 30, "job A's worker")
        other = os.path.join(tmp, "other.py")
        shutil.copy(script, other)
        t0 = time.monotonic()
        r = run([*rdzv, "--python", sys.executable, other, os.path.join(tmp, "b"), go], timeout=60)
        took = time.monotonic() - t0
        assert r.rc == 69 and took < 20, (took, r)
        line = [l for l in ddprun_lines(r.err) if "--rdzv_id" in l]
        assert line and "default --rdzv_id" in line[0] and "other.py" in line[0] \
            and "wait.py" in line[0], r
        assert job_a.poll() is None, "job A must keep running"
        # A second node of job A (the same command) is no stranger: admitted, the job re-forms.
        os.unlink(a_started)
        node_2 = start([*rdzv, "--python", sys.executable, script, a_started, go])
        try:
            wait_until(lambda: os.path.exists(a_started) and node_2.poll() is None, 30,
                       "job A's second node")
        finally:
            open(go, "w").close()
            try:
                node_2.wait(timeout=30)
            finally:
                stop(node_2)
        assert node_2.returncode == 0, node_2.stderr.read()
    finally:
        open(go, "w").close()
        try:
            job_a.wait(timeout=30)
        finally:
            stop(job_a)
    assert job_a.returncode == 0, job_a.stderr.read()


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
