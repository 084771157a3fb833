# The portable build (scripts/package.sh, docs/packaging.md#portable-artifacts): the header-only
# libraries under the usual target names, from DDPRUN_PORTABLE_INCLUDE alone. Their CMake packages
# would add -isystem /usr/include, whose glibc headers must not mix with zig's.
foreach(_header boost/version.hpp CLI/CLI.hpp fmt/format.h nlohmann/json.hpp)
  if(NOT EXISTS "${DDPRUN_PORTABLE_INCLUDE}/${_header}")
    message(FATAL_ERROR "ddprun: ${DDPRUN_PORTABLE_INCLUDE}/${_header} is missing (scripts/package.sh links it)")
  endif()
endforeach()
foreach(_target Boost::headers CLI11::CLI11 nlohmann_json::nlohmann_json)
  add_library(${_target} INTERFACE IMPORTED)
  target_include_directories(${_target} SYSTEM INTERFACE "${DDPRUN_PORTABLE_INCLUDE}")
endforeach()
# The executables need glibc 2.28 at most; pthread, dl and rt are separate libraries there.
link_libraries(Threads::Threads ${CMAKE_DL_LIBS} rt)
