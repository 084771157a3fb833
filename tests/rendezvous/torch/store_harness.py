"""Start ddprun-store on 127.0.0.1 port 0 for a test and always stop it (shared by the torch tests)."""
import contextlib
import os
import subprocess
import tempfile


@contextlib.contextmanager
def running_store(store_bin, *extra_args, env=None):
    """Yields (port, read_log). The store's stderr goes to a file so a test can assert on it."""
    log = tempfile.NamedTemporaryFile(prefix="ddprun-store-", suffix=".log", delete=False)
    proc = subprocess.Popen([store_bin, "--host", "127.0.0.1", "--port", "0", *extra_args],
                            stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        first_line = proc.stdout.readline().strip()
        if not first_line.isdigit():
            raise RuntimeError(f"ddprun-store did not print its port (got {first_line!r})")

        def read_log():
            with open(log.name) as f:
                return f.read()

        yield int(first_line), read_log
    finally:
        proc.terminate()
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError("ddprun-store ignored SIGTERM")
        log.close()
        os.unlink(log.name)
        if rc != 0:
            raise RuntimeError(f"ddprun-store exited with {rc} on SIGTERM")


def run_children(argv_list, env_list, timeout):
    """Run processes concurrently; return their outputs. Every child is reaped, even on failure."""
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for argv, env in zip(argv_list, env_list)]
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            outputs.append((p.returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outputs
