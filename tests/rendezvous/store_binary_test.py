"""ddprun-store as a program: port on stdout, clear error for a port in use, clean signal exits.

  python3 store_binary_test.py STORE_BIN
"""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
from store_harness import running_store  # noqa: E402


def main():
    store_bin = sys.argv[1]
    with running_store(store_bin) as (port, _):
        second = subprocess.run([store_bin, "--port", str(port)], capture_output=True, text=True, timeout=30)
        assert second.returncode == 1, f"second store on a busy port exited {second.returncode}"
        err = second.stderr.strip()
        assert err.count("\n") == 0, f"expected one line, got: {err!r}"
        assert f"cannot listen on 127.0.0.1:{port}: address already in use" in err, err
        assert "--port 0" in err, err
    # SIGINT ends it cleanly too (running_store checked SIGTERM).
    proc = subprocess.Popen([store_bin, "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip().isdigit()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0, "SIGINT exit status"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    bad = subprocess.run([store_bin, "--port", "70000"], capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and bad.stderr.strip(), "an out-of-range port is a usage error"
    # Durations past what the store can represent are usage errors (exit 2, one line), not a
    # silent overflow.
    for flag, value in (("--idle-timeout", "1e300"), ("--idle-timeout", "-1")):
        bad = subprocess.run([store_bin, "--port", "0", flag, value], capture_output=True, text=True, timeout=30)
        err = bad.stderr.strip()
        assert bad.returncode == 2 and err.count("\n") == 0 and flag in err, (flag, value, bad.returncode, err)
    # The standby replication is gone (issue 21): its flags are unknown, a usage error.
    for flag in ("--follow", "--follower-ack-timeout", "--max-follower-lag-bytes", "--epoch"):
        bad = subprocess.run([store_bin, "--port", "0", flag, "1"], capture_output=True, text=True, timeout=30)
        err = bad.stderr.strip()
        assert bad.returncode == 2 and err.count("\n") == 0 and flag in err, (flag, bad.returncode, err)
    print("ddprun-store binary: OK")


if __name__ == "__main__":
    main()
