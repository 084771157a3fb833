# CMake toolchain for the portable build: zig's clang and libc++ for one target of the form
# ARCH-linux-gnu.2.28, through the wrappers scripts/package.sh writes into DDPRUN_ZIG_TOOLBIN
# (cc, c++, ar, ranlib, and a file `target`). docs/packaging.md#portable-artifacts.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES DDPRUN_ZIG_TOOLBIN)
if(NOT DDPRUN_ZIG_TOOLBIN)
  set(DDPRUN_ZIG_TOOLBIN "$ENV{DDPRUN_ZIG_TOOLBIN}")
endif()
if(NOT EXISTS "${DDPRUN_ZIG_TOOLBIN}/target")
  message(FATAL_ERROR "zig-toolchain.cmake: set DDPRUN_ZIG_TOOLBIN to the wrappers' directory")
endif()
file(READ "${DDPRUN_ZIG_TOOLBIN}/target" _zig_target)
string(STRIP "${_zig_target}" _zig_target)
string(REGEX REPLACE "-.*" "" _zig_arch "${_zig_target}")
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR "${_zig_arch}")
set(CMAKE_C_COMPILER "${DDPRUN_ZIG_TOOLBIN}/cc")
set(CMAKE_CXX_COMPILER "${DDPRUN_ZIG_TOOLBIN}/c++")
set(CMAKE_AR "${DDPRUN_ZIG_TOOLBIN}/ar" CACHE FILEPATH "zig ar")
set(CMAKE_RANLIB "${DDPRUN_ZIG_TOOLBIN}/ranlib" CACHE FILEPATH "zig ranlib")
# Nothing of the build machine's libraries: OpenSSL comes from OPENSSL_ROOT_DIR, the headers from
# DDPRUN_PORTABLE_INCLUDE.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
