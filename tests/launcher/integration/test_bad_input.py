# SPDX-License-Identifier: MIT
"""Every bad input of issue 2: one line on stderr, a defined exit code, nothing left running."""
import os
import stat

from harness import clean_env, ddprun_lines, helper, main, run


def expect(args, code, needle, env=None, tmp=None):
    r = run(args, timeout=20, env=env)
    assert r.rc == code, f"{args}: expected {code}\n{r}"
    lines = [l for l in r.err.splitlines() if l.strip()]
    assert len(lines) == 1, f"{args}: expected one line on stderr\n{r}"
    assert lines[0].startswith("ddprun: ") and needle in lines[0], f"{args}: {needle!r}\n{r}"
    assert r.out == "", r


def test_usage_errors(tmp):
    true = "/bin/true"
    expect(["--bogus-flag", true], 2, "unknown option '--bogus-flag'")
    expect(["--nproc_per_node", "0", true], 2, "must be at least 1")
    expect(["--nproc-per-node", "-3", true], 2, "must be at least 1")
    expect(["--nproc_per_node", "many", true], 2, "is not a number, gpu, cpu or auto")
    expect([], 2, "no program given")
    expect(["--nproc_per_node", "2"], 2, "no program given")
    expect(["--nnodes", "2", "--node_rank", "2", true], 2, "must be less than the number of nodes")
    expect(["--nnodes", "4:2", true], 2, "MIN > MAX")
    expect(["--nnodes", "x", true], 2, "--nnodes")
    expect(["--master_port", "65536", true], 2, "out of range")
    expect(["--master-port", "-1", true], 2, "out of range")
    expect(["--redirects", "7", true], 2, "--redirects: '7' is malformed")
    expect(["--tee", "0:1,x", true], 2, "--tee")
    expect(["--local_ranks_filter", "0,a", true], 2, "--local_ranks_filter")
    expect(["-m", "--no_python", "pkg"], 2, "cannot be used together")
    expect(["--no", "pkg"], 2, "ambiguous option: --no could match --no-python")
    expect(["--events", "fd:x", true], 2, "--events: 'fd:x' is not fd:N")
    expect(["--events", "fd:97", true], 2, "descriptor 97 is not open")
    expect(["--color", "sometimes", true], 2, "--color: 'sometimes'")
    expect(["--signals-to-handle", "SIGKILL", true], 2, "--signals-to-handle: 'SIGKILL'")
    expect(["--logs-specs", "DOESNOT_EXIST", true], 2, "--logs-specs: 'DOESNOT_EXIST'")
    expect(["--event-log-handler", "mine", true], 2, "--event-log-handler: 'mine'")
    expect(["--numa-binding", "everywhere", true], 2, "--numa-binding: 'everywhere'")
    expect(["--print-completion", "tcsh"], 2, "not tcsh")
    expect(["--shutdown-timeout", "-4", true], 2, "--shutdown-timeout")


def test_multi_node_option_errors(tmp):
    expect(["--nnodes", "2", "--rdzv_backend", "c10d", "/bin/true"], 2, "needs --rdzv_endpoint")
    expect(["--nnodes", "1:2", "/bin/true"], 2, "needs --rdzv_backend=c10d")
    # An unknown --rdzv_conf key is a warning, as in torchrun (issue 11); the run goes on.
    r = run(["--dry-run", "--nnodes", "2", "--rdzv_conf", "colour=blue", "/bin/true"], timeout=20)
    assert r.rc == 0 and r.err == "ddprun: warning: --rdzv_conf: unknown key 'colour' ignored\n", r
    expect(["--standalone", "--nnodes", "2", "/bin/true"], 2, "--standalone runs one node")


def test_gpu_without_gpus(tmp):
    expect(["--nproc_per_node", "gpu", "/bin/true"], 2, "no GPU is visible",
           env=clean_env(CUDA_VISIBLE_DEVICES=""))
    if not os.path.exists("/proc/driver/nvidia/gpus") and not any(
            n.startswith("nvidia") and n[6:].isdigit() for n in os.listdir("/dev")):
        expect(["--nproc_per_node", "gpu", "/bin/true"], 2, "no GPU found")


def test_program_problems(tmp):
    expect(["/nonexistent/prog"], 127, "No such file or directory")
    expect(["no-such-program-anywhere"], 127, "not found on PATH")
    expect([tmp], 127, "is a directory")
    not_exec = os.path.join(tmp, "plain.sh")
    with open(not_exec, "w") as f:
        f.write("echo hi\n")
    os.chmod(not_exec, stat.S_IRUSR | stat.S_IWUSR)
    expect([not_exec], 127, "is not executable")
    expect(["missing_script.py"], 127, "missing_script.py")
    expect(["--python", "/nonexistent/python", os.path.join(tmp, "x.py")], 127, "Python interpreter")


def test_unwritable_log_dir(tmp):
    locked = os.path.join(tmp, "locked")
    os.mkdir(locked, 0o500)
    if os.geteuid() == 0:  # root ignores permissions: use a path below a regular file instead
        blocker = os.path.join(tmp, "file")
        open(blocker, "w").close()
        expect(["--log_dir", os.path.join(blocker, "logs"), "/bin/true"], 2, "--log_dir")
    else:
        expect(["--log_dir", os.path.join(locked, "logs"), "/bin/true"], 2, "--log_dir")
    expect(["--log-dir", "/proc/ddprun-cannot-write-here", "/bin/true"], 2, "--log_dir")


def test_events_file_unwritable(tmp):
    expect(["--events", os.path.join(tmp, "no/such/dir/events.jsonl"), "/bin/true"], 2, "--events")


if __name__ == "__main__":
    main(globals())
