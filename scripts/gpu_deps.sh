#!/usr/bin/env bash
# The Debian packages a GPU check needs on a machine that has no network and no package registry
# (a CUDA toolkit, CMake, ninja, Python with pip `torch` and nothing else): the libraries and
# headers bcdtrain builds against, pkg-config and the fortunes the check trains on. LibTorch,
# CUDA and NCCL are not among them: the machine's pip torch brings those.
#
# usage: scripts/gpu_deps.sh [DIR]
#       on a Debian 12 machine with its package archive (no root needed): downloads the .deb
#       files into DIR (default gpu-deps/ in the repository, ignored by git), about 16 MB, and
#       writes DIR/MANIFEST (package, version, kind, bytes, sha256 of each file).
#        scripts/gpu_deps.sh --unpack DIR PREFIX
#       on the GPU machine (scripts/gpu_check.sh --deps DIR calls it): checks the files against
#       DIR/MANIFEST, unpacks them under PREFIX (never /) and writes PREFIX/env.sh, which sets
#       CMake's, pkg-config's and the loader's paths to the prefix (see there).
# Packages of kind `build` are what bcdtrain links and includes: the prefix's copies come first.
# Kind `support` are what those libraries need in turn (libcurl for HDF5 and its closure): the
# loader is pointed at a support library only when the machine has no library of that soname.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
source "$repo/scripts/lib.sh"
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

BUILD_PACKAGES=(
  libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5   # TBB's CMake files name all three
  libhdf5-dev libhdf5-103-1 libhdf5-cpp-103-1 libsz2 libaec0
  libfmt-dev libfmt9
  libtomlplusplus-dev libtomlplusplus3
  libcli11-dev nlohmann-json3-dev
  liburing-dev liburing2
  libxxhash-dev libxxhash0
  libgtest-dev libgmock-dev                  # static libraries: nothing at run time
  libsentencepiece-dev libsentencepiece0 libprotobuf-lite32
  libpcre2-dev libpcre2-8-0                  # tokenizer.json's regexes (only the 8-bit library is linked)
  libutf8proc-dev libutf8proc2               # tokenizer.json's Unicode normalization
  libgloo-dev                                # headers only: the CPU process group's types
  pkgconf pkgconf-bin libpkgconf3            # pkg-config itself (CMake's pkg_check_modules)
  fortunes fortunes-min                      # the text the check prepares and trains on
)
# HDF5's libcurl and what it needs, and hwloc for TBB's tbbbind: present on most machines (CMake
# itself often links libcurl).
SUPPORT_PACKAGES=(
  libcurl4 libnghttp2-14 libidn2-0 librtmp1 libssh2-1 libpsl5 libssl3 libgssapi-krb5-2 libkrb5-3
  libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libldap-2.5-0 libsasl2-2
  libsasl2-modules-db libdb5.3 libzstd1 libbrotli1 libunistring2 libgnutls30 libhogweed6 libnettle8
  libp11-kit0 libtasn1-6 libgmp10 libffi8 libhwloc15 libudev1
)

download() {
  local dir=$1
  command -v apt-get > /dev/null || die "apt-get not found: download on a Debian 12 machine"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local stage
  stage=$(mktemp -d "$dir/.download-XXXXXX")
  # shellcheck disable=SC2064  # the folder is named now: $stage is local
  trap "rm -rf '$stage'" EXIT
  fetch() { (cd "$stage" && apt-get download -q "${BUILD_PACKAGES[@]}" "${SUPPORT_PACKAGES[@]}" > download.log 2>&1); }
  if ! fetch; then
    # A machine whose package lists were cleaned (as container images do) knows no versions to
    # download: read the lists once, as root, and try again.
    if grep -q "Unable to locate package\|has no installation candidate" "$stage/download.log" && (($(id -u) == 0)); then
      echo "gpu_deps: the package lists know none of them: apt-get update" >&2
      apt-get update -qq > "$stage/update.log" 2>&1 || die "apt-get update failed: $(tail -n 3 "$stage/update.log")"
      fetch || die "apt-get download failed: $(tail -n 3 "$stage/download.log")"
    else
      die "apt-get download failed: $(tail -n 3 "$stage/download.log")"
    fi
  fi
  local manifest=$stage/MANIFEST entry kind p f
  : > "$manifest"
  for entry in "${BUILD_PACKAGES[@]/#/build:}" "${SUPPORT_PACKAGES[@]/#/support:}"; do
    kind=${entry%%:*} p=${entry#*:}
    for f in "$stage/$p"_*.deb; do break; done
    [[ -f $f ]] || die "apt-get download left no file for $p"
    f=${f##*/}
    printf '%s %s %s %s %s %s\n' "$p" "$(dpkg-deb -f "$stage/$f" Version)" "$kind" \
      "$(stat -c %s "$stage/$f")" "$(sha256sum "$stage/$f" | cut -d' ' -f1)" "$f" >> "$manifest"
  done
  # Replace what an earlier download left: the folder holds exactly this manifest's files.
  find "$dir" -maxdepth 1 -name '*.deb' -delete
  mv "$stage"/*.deb "$manifest" "$dir/"
  local bytes
  bytes=$(awk '{ s += $4 } END { print s }' "$dir/MANIFEST")
  echo "gpu_deps: $(wc -l < "$dir/MANIFEST") packages, $((bytes / 1024)) KiB in $dir"
  echo "gpu_deps: copy it with the repository to the GPU machine and run scripts/gpu_check.sh --deps $dir"
}

# A .deb is an ar archive; its data.tar.* holds the files. dpkg-deb where there is one, else ar.
extract_deb() {
  local deb=$1 to=$2
  if command -v dpkg-deb > /dev/null; then
    dpkg-deb -x "$deb" "$to"
    return
  fi
  local member
  member=$(ar t "$deb" | grep '^data\.tar') || die "$deb: no data.tar member"
  case $member in
    *.xz) ar p "$deb" "$member" | tar -xJ -C "$to" ;;
    *.zst) ar p "$deb" "$member" | tar --zstd -x -C "$to" ;;
    *.gz) ar p "$deb" "$member" | tar -xz -C "$to" ;;
    *) ar p "$deb" "$member" | tar -x -C "$to" ;;
  esac
}

unpack() {
  local dir=$1 prefix=$2
  [[ -f $dir/MANIFEST ]] || die "$dir/MANIFEST not found: make the folder with scripts/gpu_deps.sh DIR"
  [[ -n $prefix && $prefix != / ]] || die "the prefix must be a folder of its own, not '$prefix'"
  prefix=$(realpath -m "$prefix")
  [[ $prefix != / && $prefix != /usr && $prefix != /usr/* ]] || die "refusing to unpack into $prefix"
  dir=$(cd "$dir" && pwd)
  mkdir -p "$prefix"
  rm -rf "$prefix/build" "$prefix/support" "$prefix/fallback-lib" "$prefix/env.sh"
  mkdir -p "$prefix/build" "$prefix/support" "$prefix/fallback-lib"
  local p kind bytes sum file n=0
  while read -r p _ kind bytes sum file; do
    [[ -f $dir/$file ]] || die "$dir/$file ($p) is missing"
    [[ $(sha256sum "$dir/$file" | cut -d' ' -f1) == "$sum" ]] || die "$dir/$file: checksum differs from MANIFEST"
    extract_deb "$dir/$file" "$prefix/$kind"
    n=$((n + 1))
  done < "$dir/MANIFEST"
  local root=$prefix/build/usr arch=x86_64-linux-gnu
  local lib=$root/lib/$arch
  # pkg-config files name /usr: point them at the prefix.
  local pc
  for pc in "$lib"/pkgconfig/*.pc "$root"/share/pkgconfig/*.pc; do
    [[ -f $pc ]] && sed -i -E "s#(=|-I|-L)/usr(/|\$| )#\\1$root\\2#g" "$pc"
  done
  # Support libraries the machine lacks (by soname) go to fallback-lib, which comes after the
  # prefix's own library folder.
  local have so linked=()
  have=$( (ldconfig -p 2> /dev/null || /sbin/ldconfig -p 2> /dev/null || true) | awk '{ print $1 }' | sort -u)
  for so in "$prefix/support/usr/lib/$arch"/lib*.so.* "$prefix/support/lib/$arch"/lib*.so.*; do
    [[ -e $so ]] || continue
    local name
    name=$(basename "$so")
    # Only sonames (libfoo.so.N), not the fully versioned file names they point to.
    [[ -L $so || $(objdump -p "$so" 2> /dev/null | awk '/SONAME/ { print $2 }') == "$name" ]] || continue
    grep -qxF "$name" <<< "$have" && continue
    [[ -e $prefix/fallback-lib/$name ]] && continue
    ln -s "$so" "$prefix/fallback-lib/$name"
    linked+=("$name")
  done
  cat > "$prefix/env.sh" <<EOF
# Written by scripts/gpu_deps.sh --unpack: the unpacked Debian packages, for CMake, pkg-config
# and the loader. Sourced by scripts/gpu_check.sh (and by the test that simulates a bare machine).
BCD_DEPS_PREFIX=$(printf '%q' "$root")
export PKG_CONFIG_LIBDIR=$(printf '%q' "$lib/pkgconfig:$root/share/pkgconfig")
export PKG_CONFIG_PATH=
export LD_LIBRARY_PATH=$(printf '%q' "$lib:$prefix/fallback-lib")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export BCD_FORTUNES_DIR=$(printf '%q' "$root/share/games/fortunes")
# CMake: the prefix first; HDF5 by its Debian folder (its h5cc wrapper names /usr); pkg-config
# the unpacked one.
BCD_DEPS_CMAKE_ARGS=(
  -DCMAKE_PREFIX_PATH=$(printf '%q' "$root")
  -DHDF5_ROOT=$(printf '%q' "$lib/hdf5/serial")
  -DHDF5_C_COMPILER_EXECUTABLE=HDF5_C_COMPILER_EXECUTABLE-NOTFOUND
  -DHDF5_CXX_COMPILER_EXECUTABLE=HDF5_CXX_COMPILER_EXECUTABLE-NOTFOUND
  -DHDF5_NO_FIND_PACKAGE_CONFIG_FILE=ON
  -DPKG_CONFIG_EXECUTABLE=$(printf '%q' "$root/bin/pkgconf")
)
EOF
  echo "gpu_deps: unpacked $n packages into $prefix; support libraries taken from them: ${linked[*]:-none}"
}

unpack_mode=0
parse_flags "--unpack:unpack_mode" "$@"
if ((unpack_mode)); then
  ((${#args[@]} == 2)) || usage_error "--unpack takes DIR and PREFIX"
  unpack "${args[@]}"
else
  ((${#args[@]} <= 1)) || usage_error "unexpected argument '${args[1]}' (one DIR at most)"
  download "${args[0]:-$repo/gpu-deps}"
fi
