#!/usr/bin/env python3
"""The x86_64 manylinux_2_28 wheel on a real older system: Debian 11 (bullseye, glibc 2.31) as a
chroot made by debootstrap from Debian's registry and cached as DDPRUN_CACHE/bullseye-DATE.tar.zst
(made again when missing; a fresh copy is unpacked for every run).

In the chroot: the wheel installs into bullseye's own `python3 -m venv` (offline, no dependency);
`ddprun --version`; a 4-rank `--no-python` job; a 2-agent c10d job on loopback with the token
(DDPRUN_RDZV_TOKEN: the HMAC of the statically linked libcrypto); `ddprun-store` serving a torch 1.13
(G1) client's SET/GET/ADD; a 2-agent etcd job against an etcd started outside the chroot, over plain
HTTP and over TLS with client certificates (libssl). Runs in a private mount namespace (its /proc
mount vanishes with it). Needs root, debootstrap, zstd, unshare; else skipped (77).
"""
import datetime
import fcntl
import glob
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from portable_common import CACHE, VERSION, artifact, fail, read_port, run, skip, store_round_trip  # noqa: E402



def debian_mirror():
    """The Debian archive this machine's apt already uses (its first `URIs:`/`deb` line)."""
    import glob
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*")) + ["/etc/apt/sources.list"]:
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split()
            if line.startswith("URIs:") and len(words) > 1 and "security" not in words[1]:
                return words[1]
            if words[:1] == ["deb"]:
                uri = next((w for w in words[1:] if "://" in w), None)
                if uri and "security" not in uri:
                    return uri
    skip("no Debian archive in /etc/apt sources for debootstrap")


TOKEN = "portable-check-token"
FAST = "heartbeat_interval=0.3,heartbeat_timeout=3,join_timeout=60,last_call_timeout=1"


def bullseye_tarball():
    """The cached bullseye root (made once per machine: about 2 minutes, mostly download)."""
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, "bullseye.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once make it once
        hits = sorted(glob.glob(os.path.join(CACHE, "bullseye-*.tar.zst")))
        if hits:
            return hits[-1]
        print("bullseye: debootstrap (once per machine)", flush=True)
        work = tempfile.mkdtemp(prefix="ddprun-bullseye-", dir="/var/tmp")
        try:
            root = os.path.join(work, "root")
            run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv,procps",
                 "bullseye", root, debian_mirror()], timeout=1500)
            out = os.path.join(CACHE, f"bullseye-{datetime.date.today():%Y%m%d}.tar.zst")
            run(["tar", "-C", root, "--zstd", "-cf", out + ".part", "."], timeout=600)
            os.replace(out + ".part", out)
            return out
        finally:
            shutil.rmtree(work, ignore_errors=True)


def main():
    if os.geteuid() != 0:
        skip("needs root (debootstrap, chroot, mounts)")
    for tool in ("debootstrap", "zstd", "unshare", "chroot"):
        if not shutil.which(tool):
            skip(f"{tool} is not installed (scripts/setup.sh installs it)")
    if os.environ.get("DDPRUN_PORTABLE_NS") != "1":
        # A private mount namespace: the chroot's /proc and /dev mounts end with this process.
        env = dict(os.environ, DDPRUN_PORTABLE_NS="1")
        os.execvpe("unshare", ["unshare", "--mount", "--propagation", "private", sys.executable,
                               os.path.abspath(__file__)], env)
    wheel = artifact("whl", "x86_64")
    tarball = bullseye_tarball()
    work = tempfile.mkdtemp(prefix="ddprun-bullseye-run-", dir="/var/tmp")
    try:
        check(work, tarball, wheel)
    finally:
        proc = os.path.join(work, "root", "proc")
        subprocess.run(["umount", proc], capture_output=True)
        if os.path.ismount(proc):
            print(f"bullseye: {proc} is still mounted; {work} is left for the namespace's end")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("OK: the manylinux_2_28 wheel on Debian 11 (glibc 2.31)")


def check(work, tarball, wheel):
    root = os.path.join(work, "root")
    os.makedirs(root)
    run(["tar", "-C", root, "--zstd", "-xf", tarball], timeout=300)
    # debootstrap made the device nodes (null, zero, urandom, tty...): no bind of the host's /dev.
    run(["mount", "-t", "proc", "proc", os.path.join(root, "proc")])
    glibc = run(["chroot", root, "/usr/bin/ldd", "--version"]).stdout.splitlines()[0]
    if not glibc.endswith("2.31"):
        fail(f"the chroot's glibc is not 2.31: {glibc}")
    shutil.copy(wheel, os.path.join(root, "tmp"))

    def sh(script, timeout=120, check=True, env=None):
        return run(["chroot", root, "/bin/sh", "-c", script], timeout=timeout, check=check,
                   env=clean_env(env))

    sh(f"python3 -m venv /opt/venv && /opt/venv/bin/pip install -q --no-index "
       f"--disable-pip-version-check /tmp/{os.path.basename(wheel)}", timeout=300)
    bin_ = "/opt/venv/bin"
    version = sh(f"{bin_}/ddprun --version && /opt/venv/bin/python -m ddprun --version").stdout
    if version.count(VERSION) != 2:
        fail(f"--version in the chroot: {version!r}")
    print(f"bullseye: {glibc}; ddprun --version: {version.splitlines()[0]}", flush=True)

    # 4 ranks, --no-python: each writes its RANK and WORLD_SIZE.
    sh(f"mkdir -p /tmp/j4 && {bin_}/ddprun --nproc_per_node 4 --monitor_interval 0.1 --no-python "
       "/bin/sh -c 'echo $RANK $WORLD_SIZE > /tmp/j4/$RANK'")
    ranks = sorted(open(p).read().split()[0] + "/" + open(p).read().split()[1]
                   for p in glob.glob(os.path.join(root, "tmp", "j4", "*")))
    if ranks != ["0/4", "1/4", "2/4", "3/4"]:
        fail(f"4-rank job: {ranks}")
    print("bullseye: a 4-rank --no-python job ran", flush=True)

    # ddprun-store serving a client.
    store = subprocess.Popen(["chroot", root, f"{bin_}/ddprun-store", "--host", "127.0.0.1",
                              "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        store_round_trip(read_port(store))
    finally:
        store.kill()
        store.wait()
    print("bullseye: ddprun-store served a SET/GET/ADD client", flush=True)

    def two_agents(backend, endpoint, name, conf=FAST):
        outdir = os.path.join(root, "tmp", name)
        os.makedirs(outdir)
        cmd = (f"{bin_}/ddprun --nnodes 2 --nproc_per_node 1 --rdzv_backend {backend} "
               f"--rdzv_endpoint {endpoint} --rdzv_id {name} --rdzv_conf {conf} "
               f"--local_addr 127.0.0.1 --master_port 0 --monitor_interval 0.1 --no-python "
               f"/bin/sh -c 'echo $RANK $WORLD_SIZE > /tmp/{name}/$RANK'")
        env = clean_env({"DDPRUN_RDZV_TOKEN": TOKEN})
        agents = [subprocess.Popen(["chroot", root, "/bin/sh", "-c", cmd], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                  for _ in range(2)]
        outs = []
        for a in agents:
            try:
                outs.append(a.communicate(timeout=120)[0])
            except subprocess.TimeoutExpired:
                for b in agents:
                    b.kill()
                fail(f"{name}: the 2-agent job did not end in 120 s")
        codes = [a.returncode for a in agents]
        ranks = sorted(os.listdir(outdir))
        if codes != [0, 0] or ranks != ["0", "1"]:
            fail(f"{name}: exit codes {codes}, ranks {ranks}\n" + "\n---\n".join(outs))
        print(f"bullseye: a 2-agent {name} job formed and ended 0", flush=True)

    import etcd_cluster  # tests/support: a real etcd on loopback, outside the chroot
    two_agents("c10d", f"127.0.0.1:{etcd_cluster.free_ports(1)[0]}", "c10d")
    if not os.path.exists(etcd_cluster.ETCD):
        skip("etcd is not installed (Debian: etcd-server); the c10d, store and job checks passed")
    with etcd_cluster.EtcdCluster(1) as cluster:
        two_agents("etcd", cluster.endpoints, "etcd")
    if shutil.which("openssl"):
        pki_dir = os.path.join(root, "tmp", "pki")
        pki = etcd_cluster.make_pki(pki_dir)
        inside = {k: "/tmp/pki/" + os.path.basename(v) for k, v in pki.items()}
        conf = f"{FAST},etcd_cacert={inside['ca']},etcd_cert={inside['cert']},etcd_key={inside['key']}"
        with etcd_cluster.EtcdCluster(1, tls=pki, client_auth=True) as cluster:
            two_agents("etcd", cluster.urls, "etcd_tls", conf=conf)
    else:
        print("bullseye: no openssl command here to make certificates: etcd over TLS not checked")


def clean_env(extra=None):
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
           "LANG": "C.UTF-8"}
    env.update(extra or {})
    return env


if __name__ == "__main__":
    main()
