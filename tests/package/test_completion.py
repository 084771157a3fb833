# SPDX-License-Identifier: MIT
"""The installed shell completions, generated from the CLI definition at build time: bash completes
`ddprun --nproc` to `--nproc_per_node`; the zsh file is a compdef for ddprun (and, when zsh is
installed, completes the same). Skipped (77) only while ddprun has no --print-completion flag."""
import os
import shutil
import subprocess

from package_common import BUILD_DIR, fail, run, skip, temp_dir

DDPRUN = os.environ["DDPRUN"]


def main():
    probe = subprocess.run([DDPRUN, "--print-completion", "bash"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    if probe.returncode != 0:
        skip(f"this ddprun has no --print-completion yet: {probe.stderr.strip()}")

    prefix = temp_dir("completion-prefix")
    run(["cmake", "--install", BUILD_DIR, "--prefix", prefix, "--component", "runtime"])
    bash_file = os.path.join(prefix, "share", "bash-completion", "completions", "ddprun")
    zsh_file = os.path.join(prefix, "share", "zsh", "site-functions", "_ddprun")
    for path in (bash_file, zsh_file):
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            fail(f"{path} was not installed")

    # bash: load the completion as bash-completion would, then ask it what `ddprun --nproc` completes to.
    script = f"""
        [[ -r /usr/share/bash-completion/bash_completion ]] && source /usr/share/bash-completion/bash_completion
        source {bash_file!r}
        spec=$(complete -p ddprun) || exit 3
        fn=$(sed -n 's/.*-F \\([^ ]*\\).*/\\1/p' <<<"$spec")
        COMP_LINE='ddprun --nproc'; COMP_POINT=${{#COMP_LINE}}
        COMP_WORDS=(ddprun --nproc); COMP_CWORD=1
        "$fn" ddprun --nproc ddprun
        printf '%s\\n' "${{COMPREPLY[@]}}"
    """
    out = run(["bash", "--norc", "--noprofile", "-c", script]).stdout.split()
    if "--nproc_per_node" not in out and "--nproc_per_node=" not in out:
        fail(f"bash completes 'ddprun --nproc' to {out}, not --nproc_per_node")
    print(f"ok: bash completes --nproc to {out}")

    with open(zsh_file) as f:
        first = f.readline()
    if not first.startswith("#compdef") or "ddprun" not in first:
        fail(f"{zsh_file} does not start with '#compdef ddprun': {first!r}")
    if shutil.which("zsh"):
        run(["zsh", "-n", zsh_file])
        print("ok: zsh parses _ddprun")
    print("completions: all checks passed")


if __name__ == "__main__":
    main()
