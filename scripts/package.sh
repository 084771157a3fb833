#!/usr/bin/env bash
# The portable artifacts, into dist/: per architecture a manylinux_2_28 wheel and a tarball of
# ddprun, ddprun-store, ddprun-store-proxy, the man pages and the completions, all needing only
# glibc >= 2.28. Built by zig (PyPI `ziglang`, pinned) for ARCH-linux-gnu.2.28 with its libc++
# and Debian 11's OpenSSL (libssl-dev 1.1.1) linked statically.
#   scripts/package.sh [x86_64] [aarch64]     (default: both, x86_64 first)
# Tools, OpenSSL and zig's cache live outside the clone, in DDPRUN_CACHE (default
# /var/cache/ddprun), so a second run or a fresh clone on the same machine only builds ddprun.
# Layout, choices and checks: docs/packaging.md#portable-artifacts.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# ccache keys on absolute paths (the unity files include each source by its full path): with the
# clone's root as its base directory, a clone in another folder (CI's fresh clone) hits the entries
# an earlier clone made on this machine (docs/testing.md#the-test-command).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}" CCACHE_NOHASHDIR=1
CACHE="${DDPRUN_CACHE:-/var/cache/ddprun}"
JOBS="${DDPRUN_PACKAGE_JOBS:-2}"
ZIG_VERSION="0.17.1"          # PyPI ziglang; the artifacts' compiler
AUDITWHEEL_VERSION="6.8.2"    # PyPI auditwheel; checks the wheels' tag
GLIBC_FLOOR="2.28"            # the same floor as torch's wheels (manylinux_2_28)
ARCHES=("$@")
if ((${#ARCHES[@]} == 0)); then ARCHES=(x86_64 aarch64); fi
for a in "${ARCHES[@]}"; do
  case "$a" in x86_64 | aarch64) ;; *) echo "usage: scripts/package.sh [x86_64] [aarch64]" >&2; exit 2 ;; esac
done
VERSION="$(sed -nE 's/^project\(ddprun VERSION ([0-9]+\.[0-9]+\.[0-9]+).*/\1/p' "$ROOT/CMakeLists.txt")"
log() { echo "package: $*" >&2; }
mkdir -p "$CACHE" "$ROOT/dist"

# --- tools: zig and auditwheel in a venv of their own ---------------------------------------------
VENV="$CACHE/pkg-venv-zig$ZIG_VERSION"
if [[ ! -x "$VENV/bin/auditwheel" ]]; then
  log "installing ziglang==$ZIG_VERSION and auditwheel==$AUDITWHEEL_VERSION into $VENV"
  rm -rf "$VENV"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "ziglang==$ZIG_VERSION" \
    "auditwheel==$AUDITWHEEL_VERSION"
fi
ZIG="$(ls "$VENV"/lib/python3*/site-packages/ziglang/zig)"
export ZIG_GLOBAL_CACHE_DIR="$CACHE/zig-cache" ZIG_LOCAL_CACHE_DIR="$CACHE/zig-cache"

# --- OpenSSL: Debian 11's static libcrypto.a/libssl.a (libssl-dev 1.1.1, built against glibc 2.31
# but calling nothing newer than 2.25), fetched by apt with a private source list for both
# architectures; why not a source build or dlopen: docs/packaging.md#openssl-in-the-portable-build.
OSSL_APT="$CACHE/apt-bullseye"
openssl_prefix() {  # ARCH -> a prefix with include/openssl and lib/lib{crypto,ssl}.a
  local arch="$1" deb_arch
  deb_arch="$([[ $1 == x86_64 ]] && echo amd64 || echo arm64)"
  local debs=("$OSSL_APT"/debs/libssl-dev_*_"$deb_arch".deb)
  if [[ ! -f "${debs[0]}" ]]; then
    log "fetching bullseye's libssl-dev for amd64 and arm64 into $OSSL_APT"
    mkdir -p "$OSSL_APT/lists/partial" "$OSSL_APT/cache" "$OSSL_APT/debs"
    # The archive this machine's apt already uses (its first non-security URI).
    local mirror
    mirror="$(sed -nE 's/^URIs:[[:space:]]*([^[:space:]]+).*/\1/p; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/p' \
      /etc/apt/sources.list.d/* /etc/apt/sources.list 2>/dev/null | grep -v security | head -1)"
    [[ -n "$mirror" ]] || { log "no Debian archive in /etc/apt sources"; exit 1; }
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bullseye main" \
      >"$OSSL_APT/sources.list"
    local o=(-o "Dir::Etc::SourceList=$OSSL_APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$OSSL_APT/lists" -o "Dir::Cache=$OSSL_APT/cache"
             -o Dir::State::status=/dev/null -o "APT::Architectures::=amd64" -o "APT::Architectures::=arm64")
    apt-get "${o[@]}" update -qq >&2
    (cd "$OSSL_APT/debs" && apt-get "${o[@]}" download -qq libssl-dev:amd64 libssl-dev:arm64 2>&1 |
      grep -v unsandboxed >&2 || true)
    debs=("$OSSL_APT"/debs/libssl-dev_*_"$deb_arch".deb)
  fi
  local version prefix
  version="$(basename "${debs[0]}" | cut -d_ -f2)"
  prefix="$CACHE/openssl-$version-$arch"
  if [[ ! -f "$prefix/lib/libssl.a" ]]; then
    local x
    x="$(mktemp -d)"
    dpkg-deb -x "${debs[0]}" "$x"
    rm -rf "$prefix.part" && mkdir -p "$prefix.part/include" "$prefix.part/lib"
    cp -r "$x/usr/include/openssl" "$prefix.part/include/"
    cp "$x/usr/include/$arch-linux-gnu/openssl/"* "$prefix.part/include/openssl/"  # opensslconf.h
    cp "$x/usr/lib/$arch-linux-gnu/"lib{crypto,ssl}.a "$prefix.part/lib/"
    rm -rf "$x" "$prefix" && mv "$prefix.part" "$prefix"
  fi
  echo "$prefix"
}

# Only the header-only libraries' own directories (never all of /usr/include).
INCLUDE="$ROOT/build-portable/include"
mkdir -p "$INCLUDE"
for d in boost CLI fmt nlohmann; do ln -sfn "/usr/include/$d" "$INCLUDE/$d"; done

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache); fi

build_arch() {
  local arch="$1" target="$1-linux-gnu.$GLIBC_FLOOR"
  local toolbin="$CACHE/toolchain/zig-$ZIG_VERSION/$target"
  mkdir -p "$toolbin"
  echo "$target" >"$toolbin/target"
  for tool in cc c++ ar ranlib; do
    local sub="$tool" args=""
    [[ $tool == cc || $tool == c++ ]] && args=" -target $target"
    printf '#!/bin/sh\n# zig %s for %s (written by scripts/package.sh)\nexport ZIG_GLOBAL_CACHE_DIR="%s"\nexec "%s" %s%s "$@"\n' \
      "$tool" "$target" "$ZIG_GLOBAL_CACHE_DIR" "$ZIG" "$sub" "$args" >"$toolbin/$tool.new"
    chmod +x "$toolbin/$tool.new"
    # Rewritten only when it changes: ccache keys on the compiler's mtime.
    if cmp -s "$toolbin/$tool.new" "$toolbin/$tool"; then rm "$toolbin/$tool.new"; else mv "$toolbin/$tool.new" "$toolbin/$tool"; fi
  done

  local ossl
  ossl="$(openssl_prefix "$arch")"

  local build="$ROOT/build-portable/$arch"
  # The man pages and completions are generated by running the programs: only where they run.
  local docs=OFF
  [[ $arch == "$(uname -m)" ]] && docs=ON
  log "$arch: configuring $build"
  cmake -S "$ROOT" -B "$build" -G Ninja -Wno-dev \
    -DCMAKE_TOOLCHAIN_FILE="$ROOT/packaging/portable/zig-toolchain.cmake" -DDDPRUN_ZIG_TOOLBIN="$toolbin" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXE_LINKER_FLAGS=-s -DDDPRUN_SELF_CONTAINED=ON -DDDPRUN_PORTABLE_INCLUDE="$INCLUDE" \
    -DDDPRUN_FMT_INCLUDE="$INCLUDE" -DOPENSSL_ROOT_DIR="$ossl" -DOPENSSL_USE_STATIC_LIBS=ON \
    -DBUILD_TESTING=OFF -DDDPRUN_WITH_TORCH=OFF -DDDPRUN_BUILD_EXAMPLES=OFF -DDDPRUN_BUILD_BENCH=OFF \
    -DDDPRUN_INSTALL_DOCS="$docs" "${launcher[@]}" >"$build.configure.log" 2>&1 ||
    { tail -30 "$build.configure.log" >&2; exit 1; }
  log "$arch: building (ninja -j$JOBS under nice)"
  nice -n 10 ninja -C "$build" -j"$JOBS" >"$build.build.log" 2>&1 || { tail -40 "$build.build.log" >&2; exit 1; }

  local name="ddprun-$VERSION-linux-$arch"
  local stage="$ROOT/build-portable/stage/$name"
  rm -rf "$stage"
  cmake --install "$build" --component runtime --prefix "$stage" >/dev/null
  if [[ $docs == OFF ]]; then
    # Man pages and completions are text generated from the same sources: the host's build's.
    local host_stage
    host_stage="$ROOT/build-portable/stage/ddprun-$VERSION-linux-$(uname -m)"
    [[ -d "$host_stage/share/man" ]] || { echo "package: build $(uname -m) first (its man pages serve $arch)" >&2; exit 1; }
    (cd "$host_stage" && find share -path share/doc -prune -o -type f -print | while read -r f; do
      mkdir -p "$stage/$(dirname "$f")"; cp "$f" "$stage/$f"; done)
  fi
  tar -C "$(dirname "$stage")" --owner=0 --group=0 --sort=name -czf "$ROOT/dist/$name.tar.gz" "$name"
  log "$arch: dist/$name.tar.gz"

  local wheel
  wheel="$("$VENV/bin/python" "$ROOT/packaging/portable/make_wheel.py" --stage "$stage" \
    --source "$ROOT" --version "$VERSION" --tag "py3-none-manylinux_${GLIBC_FLOOR/./_}_$arch" --out "$ROOT/dist")"
  # auditwheel names the most compatible tag the ELF files allow; ours must be at least as old.
  local shown
  shown="$("$VENV/bin/auditwheel" show "$wheel" 2>&1)"
  local policy
  policy="$(grep -oE 'manylinux_2_[0-9]+_'"$arch" <<<"$shown" | head -1)"
  local minor="${policy#manylinux_2_}"; minor="${minor%%_*}"
  if [[ -z "$policy" || "$minor" -gt "${GLIBC_FLOOR#2.}" ]]; then
    echo "$shown" >&2
    echo "package: $wheel is not manylinux_${GLIBC_FLOOR/./_}_$arch clean" >&2
    exit 1
  fi
  log "$arch: $(basename "$wheel") (auditwheel: consistent with $policy)"
}

for a in "${ARCHES[@]}"; do build_arch "$a"; done
