# SPDX-License-Identifier: MIT
"""`cmake --install` of the runtime component into a fresh prefix: the binaries, the man pages (they
render with `man -l`, and `man ddprun` finds them under the prefix), LICENSE; the installed ddprun
prints the project's version and runs a 2-rank job."""
import os
import stat

from package_common import (BUILD_DIR, SOURCE_DIR, check_man_page_renders, check_two_rank_shell_job,
                            check_version, fail, man_text, run, temp_dir)


def main():
    prefix = temp_dir("install-prefix")
    run(["cmake", "--install", BUILD_DIR, "--prefix", prefix, "--component", "runtime"])

    for program in ("ddprun", "ddprun-store"):
        path = os.path.join(prefix, "bin", program)
        if not os.path.isfile(path) or not os.stat(path).st_mode & stat.S_IXUSR:
            fail(f"{path} is missing or not executable")
    license_path = os.path.join(prefix, "share", "doc", "ddprun", "LICENSE")
    with open(license_path) as installed, open(os.path.join(SOURCE_DIR, "LICENSE")) as source:
        text = installed.read()
        if text != source.read() or "MIT License" not in text:
            fail(f"{license_path} is not the project's MIT license")

    man_dir = os.path.join(prefix, "share", "man")
    for program in ("ddprun", "ddprun-store"):
        check_man_page_renders(os.path.join(man_dir, "man1", f"{program}.1"), program)
    # What a user types: the page is found by name under the prefix's man directory.
    page = man_text(["man", "-M", man_dir, "ddprun"])
    if "--nproc_per_node" not in page or "EXIT STATUS" not in page:
        fail(f"man ddprun lacks the options or the exit status:\n{page[:2000]}")

    ddprun = os.path.join(prefix, "bin", "ddprun")
    check_version(ddprun)
    # The installed copy runs on its own: no path into the build tree is needed.
    check_two_rank_shell_job(ddprun, env=dict(os.environ, PATH="/usr/bin:/bin"))
    print("install tree: all checks passed")


if __name__ == "__main__":
    main()
