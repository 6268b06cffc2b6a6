# Shared by tests/gpu/run.sh and tests/gpu/hip-on-cuda.sh (sourced): counting one configuration's
# outcome the same way in both.

# selected NAME: whether configuration NAME runs under ONLY=REGEX (only those matching) and
# SKIP=REGEX (not those matching).
selected() {
  if [ -n "${ONLY:-}" ] && ! [[ $1 =~ $ONLY ]]; then return 1; fi
  if [ -n "${SKIP:-}" ] && [[ $1 =~ $SKIP ]]; then return 1; fi
  return 0
}

# result_counts LOG RC: sets P and F from LOG's last RESULT line; no RESULT line counts as 0
# passed and 1 failed, and a time-out (RC 124 or 137) adds a failure.
result_counts() {
  local line
  line=$(grep '^RESULT' "$1" | tail -1)
  P=$(echo "$line" | sed -n 's/.*pass=\([0-9]*\).*/\1/p'); P=${P:-0}
  F=$(echo "$line" | sed -n 's/.*fail=\([0-9]*\).*/\1/p'); F=${F:-1}
  if [ "$2" -eq 124 ] || [ "$2" -eq 137 ]; then F=$((F+1)); fi
}

# summary_line NAME RC PASS FAIL SECONDS: appends one row to SUMMARY and prints it.
summary_line() {
  SUMMARY+=("$(printf '%-28s rc=%-3s pass=%-6s fail=%-5s %3ss' "$1" "$2" "$3" "$4" "$5")")
  echo "${SUMMARY[-1]}"
}
