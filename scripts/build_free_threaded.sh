#!/usr/bin/env bash
# Build free-threaded CPython (3.14t; 3.15t on request) from Debian's source
# packages, cache it, and prepare a venv with the test peers. `3.14-gil` builds
# the same source with the GIL (python3.14, same flags): the benchmarks' yardstick.
#   usage: bash scripts/build_free_threaded.sh [3.14|3.15|3.14-gil|all]   (default 3.14)
# Cache: ${DLPX_FT_CACHE:-$HOME/.cache/dlpx/free-threaded}. A build counts as
# done only once its marker exists, so a second run reuses it in seconds.
set -euo pipefail
# Debian's mirror is the one place this machine (and CI) can fetch sources from.
MIRROR="${DLPX_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CACHE="${DLPX_FT_CACHE:-$HOME/.cache/dlpx/free-threaded}"
NICE=(nice -n 10)   # a long build: it yields the cores to interactive work
REQUIRED=(numpy apache-tvm-ffi pytest)
# jax is left out: its cp314t wheels start at 0.12, and the jax row and tests know 0.10.
OPTIONAL=(array-api-strict)

case "${1:-3.14}" in
  3.14|3.15) VERSIONS=("${1:-3.14}") ;;
  3.14-gil) VERSIONS=(3.14) ;;
  all) VERSIONS=(3.14 3.15) ;;
  *) echo "usage: $0 [3.14|3.15|3.14-gil|all]" >&2; exit 2 ;;
esac
# t: free-threaded (--disable-gil, python3.Xt); empty: the GIL build of the same source.
T=t CONFIGURE_GIL=(--disable-gil)
[ "${1:-}" = 3.14-gil ] && T="" CONFIGURE_GIL=()

# Pins: every downloaded byte is checked against a SHA-256 fixed here. For 3.14
# the .dsc is pinned and the orig tarball's hash was copied from that .dsc
# (the script also re-checks that the .dsc lists it). For 3.15 only the orig
# tarball is pinned. Debian's quilt patches (debian.tar.xz) are not applied:
# they target Debian's multiarch dh build, not a plain --prefix install.
pins() {
  case "$1" in
    3.14) DSC=python3.14_3.14.7-4.dsc
          DSC_SHA=8decf7d2e2d30a80384b96df3997d63db33e691312450aa69874664420ceda2d
          ORIG=python3.14_3.14.7.orig.tar.xz
          ORIG_SHA=3b48dac8fb59f62eaa67ac83c1eb12bda1b7a08406dd286e252c11a66be27f81 ;;
    3.15) DSC="" DSC_SHA=""
          ORIG=python3.15_3.15.0~rc2.orig.tar.xz
          ORIG_SHA=8d93af5eaaaea5adfd41bd786a7ba3f03f2ad1ab57c6a65e0b963deab91d5ad7 ;;
  esac
}
log() { printf '[build_free_threaded %s] %s\n' "$(date +%T)" "$*" >&2; }

# Install only the missing build dependencies, quietly (apt needs root).
ensure_build_deps() {
  local deps=(build-essential pkg-config curl xz-utils libssl-dev zlib1g-dev
    libffi-dev libbz2-dev liblzma-dev libsqlite3-dev libreadline-dev
    libncurses-dev uuid-dev libgdbm-dev libzstd-dev) missing=() p sudo=()
  for p in "${deps[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  log "installing missing build deps: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
}

# Download $1 from the pool dir $2 into the cache, verified against SHA-256 $3;
# a verified file already in the cache is not fetched again.
fetch() {
  local f="$CACHE/downloads/$1"
  if ! { [ -f "$f" ] && echo "$3  $f" | sha256sum -c --status; }; then
    log "downloading $1"
    curl -fsSL --retry 3 -o "$f.part" "$MIRROR/pool/main/p/$2/$1"
    echo "$3  $f.part" | sha256sum -c --status \
      || { echo "SHA-256 mismatch for $1" >&2; rm -f "$f.part"; exit 1; }
    mv "$f.part" "$f"
  fi
}

# Build, install and check one version unless its marker says it's done.
build() {
  local v="$1" prefix="$CACHE/$1$T" src="$CACHE/src/$1$T" logs="$CACHE/logs"
  pins "$v"
  # The marker holds the source hash, so changing a pin forces a rebuild.
  [ "$(cat "$prefix/.dlpx-ok" 2>/dev/null)" = "$ORIG_SHA" ] \
    && { log "$v: cached build at $prefix"; return 0; }
  ensure_build_deps
  if [ -n "$DSC" ]; then
    fetch "$DSC" "python$v" "$DSC_SHA"
    grep -q "^ $ORIG_SHA [0-9]* $ORIG\$" "$CACHE/downloads/$DSC" \
      || { echo "$DSC does not list $ORIG with the pinned hash" >&2; exit 1; }
  fi
  fetch "$ORIG" "python$v" "$ORIG_SHA"
  # Fresh tree and prefix each time: a half-done earlier try leaves nothing.
  rm -rf "$src" "$prefix"; mkdir -p "$src"
  tar -xf "$CACHE/downloads/$ORIG" -C "$src" --strip-components=1
  # 3.15 dropped the bundled libmpdec and bookworm has no libmpdec-dev, so
  # 3.15t is built WITHOUT _decimal (decimal falls back to pure-Python
  # _pydecimal: slower, same behaviour). 3.14 still bundles libmpdec.
  local checks="import ssl, sqlite3, zlib, bz2, lzma, ctypes, readline, uuid, compression.zstd"
  [ "$v" = 3.14 ] && checks="$checks; import _decimal"
  log "$v: configure/make/install (logs in $logs; several minutes)"
  ( cd "$src"
    # --disable-gil: the free-threaded ABI (python3.Xt). No PGO/LTO: too slow.
    "${NICE[@]}" ./configure "${CONFIGURE_GIL[@]}" --prefix="$prefix" \
      >"$logs/$v$T-configure.log" 2>&1 \
      || { tail -n 30 "$logs/$v$T-configure.log" >&2; exit 1; }
    "${NICE[@]}" make -j2 >"$logs/$v$T-make.log" 2>&1 \
      || { tail -n 40 "$logs/$v$T-make.log" >&2; exit 1; }
    "${NICE[@]}" make install >"$logs/$v$T-install.log" 2>&1 \
      || { tail -n 30 "$logs/$v$T-install.log" >&2; exit 1; } )
  grep -A3 'necessary bits to build these optional' "$logs/$v$T-make.log" >&2 || true
  # The check: the GIL is really off (on, for the GIL build) and the stdlib's C modules got built.
  env -u PYTHON_GIL "$prefix/bin/python${v}$T" -c \
    "import sys; assert sys._is_gil_enabled() == ('$T' == ''); $checks"
  echo "$ORIG_SHA" >"$prefix/.dlpx-ok"   # only now is the build reusable
  log "$v: built and checked"
}

# Create the venv and install the peers, binary wheels only (no source builds).
# Required peers failing fails this version; optional ones are only reported.
make_venv() {
  local v="$1" venv="$CACHE/venv-$1$T" p
  local pip=("$venv/bin/python" -m pip install -q --only-binary :all:)
  if [ ! -f "$venv/.dlpx-ok" ]; then
    rm -rf "$venv"
    "$CACHE/${v}$T/bin/python${v}$T" -m venv "$venv"
    "${pip[@]}" "${REQUIRED[@]}" || { log "$v: REQUIRED install failed"; return 1; }
    touch "$venv/.dlpx-ok"
  fi
  for p in "${OPTIONAL[@]}"; do   # retried each run: a wheel may appear later
    "$venv/bin/python" -m pip show -q "$p" >/dev/null 2>&1 && continue
    "${pip[@]}" "$p" 2>"$CACHE/logs/$v$T-pip-$p.log" \
      || log "$v: optional $p not installed: $(grep -m1 ERROR "$CACHE/logs/$v$T-pip-$p.log")"
  done
}
# One line per interpreter; exit status 1 if the GIL came back on import.
report() {
  env -u PYTHON_GIL "$CACHE/venv-$1$T/bin/python" - "${REQUIRED[@]}" "${OPTIONAL[@]}" <<'EOF'
import sys, importlib.metadata as md
import numpy, tvm_ffi  # a module lacking Py_mod_gil would turn the GIL back on
gil = sys._is_gil_enabled() and "free-threading" in sys.version
def ver(d):
    try: return md.version(d)
    except md.PackageNotFoundError: return "absent"
print(f"python {sys.version.split()[0]} gil_enabled_after_numpy_tvm_ffi={sys._is_gil_enabled()}",
      *(f"{d}={ver(d)}" for d in sys.argv[1:]))
sys.exit(1 if gil else 0)
EOF
}

mkdir -p "$CACHE/downloads" "$CACHE/src" "$CACHE/logs"
exec 9>"$CACHE/.lock"; flock 9   # two concurrent runs must not share a tree
status=0
for v in "${VERSIONS[@]}"; do
  build "$v"
  if make_venv "$v"; then report "$v" || { log "$v: GIL re-enabled or import failed"; status=1; }
  else status=1; fi
done
for v in "${VERSIONS[@]}"; do echo "$CACHE/venv-${v}$T/bin/python"; done
exit "$status"
