# How many of CTest's parallel slots a test takes (its PROCESSORS). scripts/test.sh runs
# `ctest -j` with twice as many slots as cores, because most cases spend their time waiting on
# heartbeats, timeouts and other processes; a case whose ranks import torch, or one that compiles,
# keeps cores busy, so it takes two slots: never more of them at once than there are cores, as
# under `ctest -j$(nproc)`. docs/testing.md#the-test-command.
#
# Called at the end of each tests/ CMakeLists.txt that registers such tests: CMake 3.25 sets a
# test's properties only from the directory that created it.
function(ddprun_weigh_tests)
  get_property(_tests DIRECTORY PROPERTY TESTS)
  foreach(_test IN LISTS _tests)
    get_test_property(${_test} LABELS _labels)
    if(_labels MATCHES "(^|;)(torch|package|chaos)(;|$)")
      set_tests_properties(${_test} PROPERTIES PROCESSORS 2)
    endif()
  endforeach()
endfunction()
