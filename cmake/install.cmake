# Install rules, man pages, shell completions and the .deb (CPack). Included by the top-level
# CMakeLists after every subdirectory, so all targets exist here. Layout and checks: docs/packaging.md.
#
# Install components:
#   runtime  bin/ddprun, bin/ddprun-store, bin/ddprun-store-proxy, man pages, bash/zsh completions, LICENSE -> the `ddprun` .deb
#   worker   the LibTorch worker library and its CMake package `ddprun::worker`; its install() and
#            install(EXPORT) rules live in worker/CMakeLists.txt (see "Worker package" below)
#
# In a Python wheel build (scikit-build-core sets SKBUILD) the executables go to the environment's
# scripts directory (bin/ of a venv) and the man pages to its share/man, where `man` finds them
# through PATH.

if(SKBUILD)
  set(DDPRUN_INSTALL_BINDIR "${SKBUILD_SCRIPTS_DIR}")
  set(DDPRUN_INSTALL_MANDIR "${SKBUILD_DATA_DIR}/${CMAKE_INSTALL_MANDIR}")
else()
  set(DDPRUN_INSTALL_BINDIR "${CMAKE_INSTALL_BINDIR}")
  set(DDPRUN_INSTALL_MANDIR "${CMAKE_INSTALL_MANDIR}")
endif()

# --- executables ------------------------------------------------------------------------------
install(TARGETS ddprun ddprun-store RUNTIME DESTINATION "${DDPRUN_INSTALL_BINDIR}" COMPONENT runtime)
# The node-local store proxy on its own (docs/rendezvous.md, "Store proxy"), when CLI11 built it.
if(TARGET ddprun-store-proxy)
  install(TARGETS ddprun-store-proxy RUNTIME DESTINATION "${DDPRUN_INSTALL_BINDIR}" COMPONENT runtime)
endif()
if(NOT SKBUILD)
  install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DOCDIR}" COMPONENT runtime)
endif()

# --- man pages: generated from each program's --help at build time (help2man) ------------------
set(DDPRUN_MAN_PAGES "")
if(DDPRUN_INSTALL_DOCS)
  find_program(DDPRUN_HELP2MAN help2man)
  if(NOT DDPRUN_HELP2MAN)
    message(WARNING "ddprun: help2man not found; man pages are not built (apt-get install help2man)")
  endif()
endif()
if(DDPRUN_INSTALL_DOCS AND DDPRUN_HELP2MAN)
  set(_man_dir "${CMAKE_BINARY_DIR}/man")
  file(MAKE_DIRECTORY "${_man_dir}")
  set(_man_names
      "ddprun=launch and supervise the processes of a distributed PyTorch job"
      "ddprun-store=a c10d-compatible TCP store for torch 1.13 and 2.x clients")
  foreach(_entry IN LISTS _man_names)
    string(REPLACE "=" ";" _entry "${_entry}")
    list(GET _entry 0 _prog)
    list(GET _entry 1 _description)
    set(_include "${PROJECT_SOURCE_DIR}/packaging/man/${_prog}.h2m")
    add_custom_command(
      OUTPUT "${_man_dir}/${_prog}.1"
      COMMAND "${DDPRUN_HELP2MAN}" --no-info --section=1 --version-string=${PROJECT_VERSION}
              "--name=${_description}" "--include=${_include}" "--output=${_man_dir}/${_prog}.1"
              "$<TARGET_FILE:${_prog}>"
      DEPENDS ${_prog} "${_include}"
      COMMENT "Generating man page ${_prog}.1"
      VERBATIM)
    list(APPEND DDPRUN_MAN_PAGES "${_man_dir}/${_prog}.1")
  endforeach()
  add_custom_target(man_pages ALL DEPENDS ${DDPRUN_MAN_PAGES})
  install(FILES ${DDPRUN_MAN_PAGES} DESTINATION "${DDPRUN_INSTALL_MANDIR}/man1" COMPONENT runtime)
endif()

# --- shell completions: generated from the CLI definition (`ddprun --print-completion bash|zsh`) --
# Built only when the launcher's sources offer --print-completion, so this file works before and
# after that flag lands; the package test skips its completion checks when they are absent.
set(DDPRUN_HAVE_COMPLETION OFF)
file(GLOB_RECURSE _launcher_sources "${PROJECT_SOURCE_DIR}/launcher/*.cpp")
foreach(_source IN LISTS _launcher_sources)
  file(STRINGS "${_source}" _hit REGEX "print-completion" LIMIT_COUNT 1)
  if(_hit)
    set(DDPRUN_HAVE_COMPLETION ON)
    break()
  endif()
endforeach()
if(DDPRUN_INSTALL_DOCS AND DDPRUN_HAVE_COMPLETION AND NOT SKBUILD)
  set(_completion_dir "${CMAKE_BINARY_DIR}/completions")
  file(MAKE_DIRECTORY "${_completion_dir}")
  foreach(_shell_file "bash=ddprun" "zsh=_ddprun")
    string(REPLACE "=" ";" _shell_file "${_shell_file}")
    list(GET _shell_file 0 _shell)
    list(GET _shell_file 1 _file)
    add_custom_command(
      OUTPUT "${_completion_dir}/${_shell}/${_file}"
      COMMAND "${CMAKE_COMMAND}" "-DPROGRAM=$<TARGET_FILE:ddprun>" "-DARGS=--print-completion ${_shell}"
              "-DOUTPUT=${_completion_dir}/${_shell}/${_file}" -P "${PROJECT_SOURCE_DIR}/cmake/run_to_file.cmake"
      DEPENDS ddprun "${PROJECT_SOURCE_DIR}/cmake/run_to_file.cmake"
      COMMENT "Generating the ${_shell} completion for ddprun"
      VERBATIM)
    file(MAKE_DIRECTORY "${_completion_dir}/${_shell}")
  endforeach()
  add_custom_target(completions ALL DEPENDS "${_completion_dir}/bash/ddprun" "${_completion_dir}/zsh/_ddprun")
  install(FILES "${_completion_dir}/bash/ddprun"
          DESTINATION "${CMAKE_INSTALL_DATADIR}/bash-completion/completions" COMPONENT runtime)
  # zsh: Debian's zsh searches vendor-completions for packaged files (prefix /usr, the .deb) and
  # site-functions under /usr/local; the choice is made at install time, when the prefix is known.
  install(CODE "
    if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
      set(_zsh_dir vendor-completions)
    else()
      set(_zsh_dir site-functions)
    endif()
    file(INSTALL \"${_completion_dir}/zsh/_ddprun\"
         DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATADIR}/zsh/\${_zsh_dir}\")"
    COMPONENT runtime)
endif()

# --- Worker package (ddprun::worker) ------------------------------------------------------------
# worker/CMakeLists.txt installs the worker library, its headers (include/ddprun/...) and its
# package files (${CMAKE_INSTALL_LIBDIR}/cmake/ddprun) under COMPONENT worker, so that
# `find_package(ddprun REQUIRED COMPONENTS worker)` works against an installed prefix. Nothing is
# needed here: every install component is packaged below, `worker` as the ddprun-worker-dev .deb.

# --- the .deb -----------------------------------------------------------------------------------
# `cpack -G DEB` in the build directory (or `cmake --build build --target package`).
set(CPACK_PACKAGE_NAME ddprun)
set(CPACK_PACKAGE_VENDOR "ddprun developers")
set(CPACK_PACKAGE_CONTACT "ddprun developers <dev@ddprun.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "launcher for distributed PyTorch jobs, compatible with torchrun")
set(CPACK_RESOURCE_FILE_LICENSE "${PROJECT_SOURCE_DIR}/LICENSE")
set(CPACK_PACKAGE_DIRECTORY "${CMAKE_BINARY_DIR}/packages")
set(CPACK_GENERATOR DEB)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
# Depends is computed by dpkg-shlibdeps from the shared libraries the packaged binaries link.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME ddprun)
# The summary above is the Description's first line; this is its body.
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
    "ddprun starts and supervises the processes of a distributed PyTorch job with
torchrun's flags and environment contract, hosts the job's c10d-compatible TCP
store, meets other nodes through it and detects Slurm, Open MPI and Kubernetes.
ddprun-store serves the store on its own.")
set(CPACK_DEBIAN_WORKER_PACKAGE_NAME ddprun-worker-dev)
set(CPACK_DEBIAN_WORKER_PACKAGE_DEPENDS "ddprun (= ${PROJECT_VERSION})")
get_cmake_property(_install_components COMPONENTS)
list(REMOVE_ITEM _install_components Unspecified)
set(CPACK_COMPONENTS_ALL ${_install_components})
include(CPack)
