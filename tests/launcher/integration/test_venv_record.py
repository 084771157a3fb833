# SPDX-License-Identifier: MIT
"""ddprun from a virtual environment, and @record error files (issue 23, items 15 and 16):
`VENV/bin/python -m ddprun` and the wheel's `VENV/bin/ddprun` run Python workers with the venv's
interpreter (as `python -m torch.distributed.run` does), unless --python or PYTHON_EXEC say
otherwise; TORCHELASTIC_ERROR_FILE set for ddprun receives the root cause's @record error file, as
torchrun's does. A real venv (python3 -m venv --system-site-packages over Debian's Python, whose
torch is 1.13) and a real PyTorch script decorated with @record.
Usage: test_venv_record.py [test names]"""
import json
import os
import shutil
import subprocess
import sys
import textwrap

from harness import DDPRUN, Skip, clean_env, main

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BASE_PYTHON = "/usr/bin/python3"

WHO = """
    import os, sys
    import torch
    with open(sys.argv[1] + "." + os.environ["RANK"], "w") as f:
        f.write(f"{sys.prefix}\\n{torch.__version__}\\n")
    """

RECORD = """
    import sys
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main():
        import os
        if os.environ["RANK"] == "1":
            raise ValueError("rank one gives up")

    main()
    """


def make_venv(tmp):
    if not os.path.exists(BASE_PYTHON):
        raise Skip(f"{BASE_PYTHON} is missing")
    venv = os.path.join(tmp, "venv")
    r = subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", "--system-site-packages", venv],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise Skip(f"python3 -m venv failed: {r.stderr.strip()}")
    probe = subprocess.run([os.path.join(venv, "bin", "python"), "-c", "import torch"],
                           capture_output=True, timeout=120)
    if probe.returncode != 0:
        raise Skip(f"no torch for {BASE_PYTHON}")
    # What the wheel installs: the executable itself in the venv's bin/ (a copy, not a link:
    # ddprun finds its venv through its own path), and the ddprun package.
    shutil.copy2(DDPRUN, os.path.join(venv, "bin", "ddprun"))
    return venv


def write_script(tmp, name, body):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(body))
    return path


def venv_env(**extra):
    # PATH's python3 is another interpreter (torch 2.x); the venv is not activated.
    env = clean_env(PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("PYTHON_EXEC", None)
    env.pop("VIRTUAL_ENV", None)
    env.update(extra)
    return env


def prefixes(out, n=2):
    found = []
    for r in range(n):
        with open(f"{out}.{r}") as f:
            found.append(f.read().split("\n")[0])
    return found


def launch(cmd, env, timeout=180):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                       start_new_session=True)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


def test_python_m_ddprun_and_the_entry_point_use_the_venv(tmp):
    venv = make_venv(tmp)
    who = write_script(tmp, "who.py", WHO)
    venv_python = os.path.join(venv, "bin", "python")
    real_venv = os.path.realpath(venv)
    for i, cmd in enumerate([[venv_python, "-m", "ddprun", "--nproc-per-node", "2"],
                             [os.path.join(venv, "bin", "ddprun"), "--nproc-per-node", "2"]]):
        out = os.path.join(tmp, f"who{i}")
        launch([*cmd, who, out], venv_env())
        got = [os.path.realpath(p) for p in prefixes(out)]
        assert got == [real_venv, real_venv], (cmd, got)
    # --python and PYTHON_EXEC still say otherwise.
    outside = shutil.which("python3", path=clean_env()["PATH"])
    out = os.path.join(tmp, "who_flag")
    launch([venv_python, "-m", "ddprun", "--nproc-per-node", "2", "--python", outside, who, out],
           venv_env())
    assert all(os.path.realpath(p) != real_venv for p in prefixes(out)), ("--python", prefixes(out))
    out = os.path.join(tmp, "who_env")
    launch([os.path.join(venv, "bin", "ddprun"), "--nproc-per-node", "2", who, out],
           venv_env(PYTHON_EXEC=outside))
    assert all(os.path.realpath(p) != real_venv for p in prefixes(out)), ("PYTHON_EXEC", prefixes(out))


def test_launcher_error_file_gets_the_root_cause_record(tmp):
    venv = make_venv(tmp)
    script = write_script(tmp, "record_fail.py", RECORD)
    mine = os.path.join(tmp, "launcher_error.json")
    with open(mine, "w") as f:
        f.write("stale")  # torchrun replaces what is there
    r = subprocess.run([os.path.join(venv, "bin", "ddprun"), "--nproc-per-node", "2", script],
                       env=venv_env(TORCHELASTIC_ERROR_FILE=mine), capture_output=True,
                       text=True, timeout=180, start_new_session=True)
    assert r.returncode == 1, f"{r.returncode}\n{r.stderr[-3000:]}"
    with open(mine) as f:
        copied = json.load(f)
    message = copied["message"]
    assert "rank one gives up" in message["message"], copied
    assert "ValueError" in message["extraInfo"]["py_callstack"], copied
    assert message["errorCode"] == 1, copied
    assert "rank one gives up" in r.stderr, r.stderr[-3000:]
    # A run that succeeds writes nothing; nor does one whose root cause wrote no error file.
    os.unlink(mine)
    ok = write_script(tmp, "ok.py", "print('fine')\n")
    subprocess.run([os.path.join(venv, "bin", "ddprun"), ok], env=venv_env(
        TORCHELASTIC_ERROR_FILE=mine), capture_output=True, timeout=180, check=True)
    assert not os.path.exists(mine)


if __name__ == "__main__":
    main(globals())
