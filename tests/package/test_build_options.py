# SPDX-License-Identifier: MIT
"""Configure-only checks of the build switches on fresh build directories:
- BUILD_TESTING=OFF registers no test and builds no test program, and needs no doctest;
- DDPRUN_BUILD_BENCH adds the benchmark programs only when ON (default OFF);
- Boost is found without any compiled component."""
import os
import re

from package_common import SOURCE_DIR, fail, run, temp_dir


def configure(build_dir, *options):
    run(["cmake", "-S", SOURCE_DIR, "-B", build_dir, "-DDDPRUN_WITH_TORCH=OFF", *options])


def targets(build_dir):
    """Every target name the generated build system knows."""
    help_text = run(["cmake", "--build", build_dir, "--target", "help"]).stdout
    return set(re.findall(r"^\.\.\. ([\w.+-]+)", help_text, re.MULTILINE)) | \
        set(re.findall(r"^([\w.+-]+): phony", help_text, re.MULTILINE))


def main():
    build_dir = temp_dir("build-testing-off")
    # CMAKE_DISABLE_FIND_PACKAGE_doctest: configuring must not even look for doctest.
    configure(build_dir, "-DBUILD_TESTING=OFF", "-DCMAKE_DISABLE_FIND_PACKAGE_doctest=ON")
    listing = run(["ctest", "-N"], cwd=build_dir).stdout
    if not re.search(r"^Total Tests: 0$", listing, re.MULTILINE):
        fail(f"BUILD_TESTING=OFF still registers tests:\n{listing}")
    names = targets(build_dir)
    if "ddprun" not in names or "ddprun-store" not in names:
        fail(f"the build lost its programs: {sorted(names)}")
    test_programs = sorted(n for n in names if re.search(r"(_tests?|crasher|env_dumper)$", n))
    if test_programs:
        fail(f"BUILD_TESTING=OFF still builds test programs: {test_programs}")
    if "store_loadgen" in names:
        fail("the benchmarks are built although DDPRUN_BUILD_BENCH defaults to OFF")
    print("ok: BUILD_TESTING=OFF: 0 tests, no test program, no doctest; no benchmark by default")

    configure(build_dir, "-DDDPRUN_BUILD_BENCH=ON")
    names = targets(build_dir)
    if "store_loadgen" not in names or "rdzv_join_bench" not in names:
        fail(f"DDPRUN_BUILD_BENCH=ON does not add the benchmark programs: {sorted(names)}")
    print("ok: DDPRUN_BUILD_BENCH=ON adds the benchmark programs")

    with open(os.path.join(build_dir, "CMakeCache.txt")) as cache:
        compiled = sorted(set(re.findall(r"^boost_(\w+)_DIR:", cache.read(), re.MULTILINE)) - {"headers"})
    if compiled:
        fail(f"compiled Boost components are looked up: {compiled}")
    print("ok: Boost is used header-only")


if __name__ == "__main__":
    main()
