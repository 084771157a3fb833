"""Start ddprun-store and a ddprun-store-proxy in front of it; always stop both."""
import contextlib
import os
import re
import subprocess
import tempfile


def _start(argv, name):
    log = tempfile.NamedTemporaryFile(prefix=name + "-", suffix=".log", delete=False)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    first = proc.stdout.readline().strip()
    if not first.isdigit():
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{name} did not print its port (got {first!r})")
    return proc, log, int(first)


def _stop(proc, log, name):
    proc.terminate()
    try:
        rc = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{name} ignored SIGTERM")
    with open(log.name) as f:
        text = f.read()
    log.close()
    os.unlink(log.name)
    if rc != 0:
        raise RuntimeError(f"{name} exited with {rc} on SIGTERM: {text}")
    return text


class ProxyRun:
    def __init__(self):
        self.store_port = self.proxy_port = None
        self.proxy_log = ""
        self.store_log = ""

    def stats(self):
        """The proxy's counters (valid after the context exits)."""
        m = re.search(r"stats (.*)", self.proxy_log)
        assert m, f"no stats line in the proxy's log: {self.proxy_log!r}"
        return {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


@contextlib.contextmanager
def store_and_proxy(store_bin, proxy_bin, store_args=(), proxy_args=(), upstream=None):
    """upstream(store_port) -> port: what the proxy connects to instead of the store itself."""
    run = ProxyRun()
    store, store_log, run.store_port = _start([store_bin, "--port", "0", *store_args], "ddprun-store")
    try:
        up = upstream(run.store_port) if upstream else run.store_port
        proxy, proxy_log, run.proxy_port = _start(
            [proxy_bin, "--port", "0", "--upstream", f"127.0.0.1:{up}", *proxy_args], "ddprun-store-proxy")
        try:
            yield run
        finally:
            run.proxy_log = _stop(proxy, proxy_log, "ddprun-store-proxy")
    finally:
        run.store_log = _stop(store, store_log, "ddprun-store")
