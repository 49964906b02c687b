# shellcheck shell=bash
# Sourced by the scripts in scripts/: their messages, flags, --help and argument errors, and byte
# sizes as bcdtrain reads them. Messages start with the script's name (scripts/NAME.sh -> NAME);
# the script defines `usage` (its --help text, on stdout) before parse_flags.
# Exit status: 2 for what the caller must fix (a bad argument, a missing tool, build or file).
script_name=$(basename "$0" .sh)

# say MSG...: one line on stderr, after the script's name.
say() { echo "$script_name: $*" >&2; }
# die MSG...: the script cannot go on for a reason the caller must fix (a missing tool, build or
# file, a refused input); exit 2. A failure of the work itself is `say ...; exit 1`.
die() { say "$@"; exit 2; }
# usage_error MSG...: a bad argument; exit 2.
usage_error() { say "$* (see scripts/$script_name.sh --help)"; exit 2; }

# parse_flags SPEC "$@": SPEC lists the flags, separated by spaces:
#   --name=VAR   takes a value, as `--name VALUE` or `--name=VALUE`, into VAR (never empty)
#   --name:VAR   a switch: VAR=1
# -h and --help print usage and exit 0; after `--` every argument is positional. Positional
# arguments go, in order, to the array `args`. An unknown flag, a missing or empty value or a
# value given to a switch is a usage error naming the flag. (VAR is not one of its locals: spec,
# name, var, value.)
parse_flags() {
  local spec=" ${1//$'\n'/ } " name var value
  shift
  args=()
  while (($#)); do
    name=${1%%=*}
    case $1 in
      -h | --help) usage; exit 0 ;;
      --) shift; args+=("$@"); break ;;
      -?*)
        if [[ $spec == *" $name="* ]]; then
          var=${spec#*" $name="} var=${var%% *}
          if [[ $1 == *=* ]]; then
            value=${1#*=}
          elif (($# >= 2)); then
            value=$2
            shift
          else
            value=""
          fi
          [[ -n $value ]] || usage_error "$name needs a value"
          printf -v "$var" '%s' "$value"
        elif [[ $spec == *" $name:"* ]]; then
          [[ $1 != *=* ]] || usage_error "$name takes no value"
          var=${spec#*" $name:"} var=${var%% *}
          printf -v "$var" 1
        else
          usage_error "unknown flag '$name'"
        fi ;;
      *) args+=("$1") ;;
    esac
    shift
  done
}

# no_args: the script takes no positional argument.
no_args() { ((${#args[@]} == 0)) || usage_error "unexpected argument '${args[0]}'"; }

# check_int FLAG VALUE [MIN]: VALUE is a whole number, at least MIN (default 1).
check_int() {
  local min=${3:-1}
  [[ $2 =~ ^[0-9]{1,9}$ && $2 != 0?* ]] && (($2 >= min)) && return
  if ((min == 1)); then usage_error "$1: expected a positive integer, got '$2'"; fi
  usage_error "$1: expected an integer of at least $min, got '$2'"
}

# flags_checked: ends a call made only to check the flags (BCD_FLAGS_CHECK=1: scripts/bench.sh,
# before it builds); called once the flags are parsed and judged, before any work.
flags_checked() { [[ ${BCD_FLAGS_CHECK:-} != 1 ]] || exit 0; }

# parse_bytes FLAG TEXT: TEXT in bytes, on stdout. The forms of bcdtrain's sizes
# (src/base/bytes.cpp): a number with an optional fraction and unit, case-insensitive, spaces
# around: B, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024), kB/MB/GB/TB (powers of 1000), none for
# bytes: "4096", "4KiB", "1.5GB", "2 g". The result must be a whole number of bytes; computed in
# integers, so at most 2^63-1 (bash's arithmetic) and 18 fraction digits.
parse_bytes() {
  local flag=$1 text=$2
  local re='^[[:space:]]*([0-9]*)(\.([0-9]*))?[[:space:]]*([^[:space:]]*)[[:space:]]*(.*)$'
  [[ $text =~ $re && -n ${BASH_REMATCH[1]}${BASH_REMATCH[3]} ]] ||
    usage_error "$flag: size '$text': expected a number with an optional unit (e.g. 4096, 4KiB, 1.5GB)"
  local whole=${BASH_REMATCH[1]} frac=${BASH_REMATCH[3]} unit=${BASH_REMATCH[4]} scale
  [[ -z ${BASH_REMATCH[5]} ]] || usage_error "$flag: size '$text': unexpected text after the unit"
  case ${unit,,} in
    "" | b) scale=1 ;;
    k | kib) scale=$((1 << 10)) ;;
    m | mib) scale=$((1 << 20)) ;;
    g | gib) scale=$((1 << 30)) ;;
    t | tib) scale=$((1 << 40)) ;;
    kb) scale=1000 ;;
    mb) scale=1000000 ;;
    gb) scale=1000000000 ;;
    tb) scale=1000000000000 ;;
    *) usage_error "$flag: size '$text': unknown unit '$unit' (expected B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)" ;;
  esac
  whole=${whole#"${whole%%[!0]*}"} frac=${frac%"${frac##*[!0]}"}  # no leading, no trailing zeros
  local n=${#frac} s=$scale part
  # Digit strings of one length compare as their numbers; shorter ones fit bash's integers.
  # shellcheck disable=SC2071
  [[ ${#whole} -lt 19 || (${#whole} == 19 && ! $whole > 9223372036854775807) ]] ||
    usage_error "$flag: size '$text': more than 2^63-1 bytes"
  # The fraction's bytes, frac * scale / 10^n: cancel the tens a decimal unit holds, then frac
  # must hold 5^n and what is left 2^n, or the bytes are not whole.
  while ((n > 0 && s % 10 == 0)); do s=$((s / 10)) n=$((n - 1)); done
  local q=-1
  ((${#frac} > 18 || 10#0$frac % 5 ** n)) || q=$((10#0$frac / 5 ** n))
  ((q >= 0 && q * s % (1 << n) == 0)) || usage_error "$flag: size '$text': not a whole number of bytes"
  part=$((q * s >> n))
  ((10#0$whole <= (9223372036854775807 - part) / scale)) || usage_error "$flag: size '$text': more than 2^63-1 bytes"
  echo $((10#0$whole * scale + part))
}
