#!/usr/bin/env bash
# A bare GPU machine, simulated: scripts/gpu_deps.sh downloads the packages, --unpack puts them in
# a private prefix, and a configure with the system's copies hidden from CMake (/usr ignored as a
# prefix, pkg-config limited to the prefix) must find every dependency there; a small build
# (bcd_deps_check: each library used once) must link and run against the prefix's libraries (the
# loader's path puts them first; the system's cannot be removed without root).
# Cases: bare (the whole simulation), refuse (--unpack's refusals).
# Environment (from tests/scripts/CMakeLists.txt): BCD_TORCH_DIR, BCD_CUDA_ENABLED.
# Exit 77 (ctest: skipped) where apt-get is missing: the packages cannot be downloaded there.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=harness.sh
source "$here/harness.sh" "$@"

case $case in
  bare)
    if ! command -v apt-get > /dev/null; then
      echo "skipped: apt-get not found (scripts/gpu_deps.sh downloads Debian's packages)"
      exit 77
    fi
    run download bash "$repo/scripts/gpu_deps.sh" "$scratch/debs"
    expect_rc download 0
    # The folder travels to the GPU machine: under 20 MB.
    bytes=$(awk '{ s += $4 } END { print s + 0 }' "$scratch/debs/MANIFEST" 2> /dev/null)
    ((bytes > 0 && bytes <= 20 * 1024 * 1024)) || fail "the packages take $bytes bytes (at most 20 MiB)"
    run unpack bash "$repo/scripts/gpu_deps.sh" --unpack "$scratch/debs" "$scratch/prefix"
    expect_rc unpack 0
    if ((failures)); then verdict gpu_deps; fi
    # shellcheck source=/dev/null
    source "$scratch/prefix/env.sh"
    generator=()
    command -v ninja > /dev/null && generator=(-G Ninja)
    run configure cmake -S "$repo" -B "$scratch/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      "-DTorch_DIR=${BCD_TORCH_DIR:?}" "-DBCD_CUDA=${BCD_CUDA_ENABLED:-OFF}" -DBCD_PCH=OFF \
      "${BCD_DEPS_CMAKE_ARGS[@]}" -DCMAKE_IGNORE_PREFIX_PATH=/usr
    expect_rc configure 0
    cache=$scratch/build/CMakeCache.txt
    for var in TBB_DIR fmt_DIR tomlplusplus_DIR CLI11_DIR nlohmann_json_DIR GTest_DIR HDF5_C_INCLUDE_DIR \
      HDF5_CXX_INCLUDE_DIR SENTENCEPIECE_TRAIN_LIB BCD_GLOO_INCLUDE_DIR BCD_FMT_INCLUDE_DIR \
      pkgcfg_lib_URING_uring pkgcfg_lib_XXHASH_xxhash pkgcfg_lib_PCRE2_pcre2-8 pkgcfg_lib_UTF8PROC_utf8proc \
      PKG_CONFIG_EXECUTABLE; do
      value=$(sed -n "s/^$var:[A-Z]*=//p" "$cache" 2> /dev/null)
      [[ $value == "$scratch/prefix/"* ]] || fail "configure: $var is '$value', not in the unpacked prefix"
    done
    run build cmake --build "$scratch/build" --target bcd_deps_check -j 2
    expect_rc build 0
    run deps_check "$scratch/build/tests/bcd_deps_check"
    expect_rc deps_check 0
    expect_text deps_check out "[  PASSED  ] 7 tests."
    # Every library it reports was loaded from the prefix, and the fortunes are the prefix's.
    loaded=$(grep -c '^loaded ' "$scratch/deps_check.out")
    ((loaded == 10)) || fail "deps_check: $loaded libraries reported, expected 10"
    while read -r _ what _ path; do
      [[ $path == "$scratch/prefix/"* ]] || fail "deps_check: $what loaded from '$path', not the prefix"
    done < <(grep '^loaded ' "$scratch/deps_check.out")
    expect_text deps_check out "fortunes in $scratch/prefix/"
    ;;
  refuse)
    mkdir -p "$scratch/debs"
    run no_manifest bash "$repo/scripts/gpu_deps.sh" --unpack "$scratch/debs" "$scratch/prefix"
    expect_rc no_manifest 2
    expect_text no_manifest err "MANIFEST not found"
    echo "libfoo 1.0 build 3 0000 libfoo_1.0_amd64.deb" > "$scratch/debs/MANIFEST"
    run root bash "$repo/scripts/gpu_deps.sh" --unpack "$scratch/debs" /
    expect_rc root 2
    expect_text root err "not '/'"
    run usr bash "$repo/scripts/gpu_deps.sh" --unpack "$scratch/debs" /usr/local/x
    expect_rc usr 2
    expect_text usr err "refusing to unpack into /usr/local/x"
    run missing bash "$repo/scripts/gpu_deps.sh" --unpack "$scratch/debs" "$scratch/prefix"
    expect_rc missing 2
    expect_text missing err "libfoo_1.0_amd64.deb (libfoo) is missing"
    echo "not a deb" > "$scratch/debs/libfoo_1.0_amd64.deb"
    run checksum bash "$repo/scripts/gpu_deps.sh" --unpack "$scratch/debs" "$scratch/prefix"
    expect_rc checksum 2
    expect_text checksum err "checksum differs from MANIFEST"
    ;;
  *) fail "unknown case '$case'" ;;
esac
verdict gpu_deps
