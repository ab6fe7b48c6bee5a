#!/bin/sh
# expect.sh STATUS REGEX COMMAND [ARG...]: runs COMMAND and passes only when it exits with STATUS
# (0, or "nonzero" for a command that must fail) and its output, stdout and stderr, matches the
# extended regular expression REGEX. ctest's PASS_REGULAR_EXPRESSION alone passes on the output
# whatever the exit status (c_tests/CMakeLists.txt, dlpx_expect_test).
want=$1 regex=$2
shift 2
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
case $want in
  0) [ "$status" -eq 0 ] || { echo "expect.sh: exit status $status, expected 0"; exit 1; } ;;
  nonzero) [ "$status" -ne 0 ] || { echo "expect.sh: exit status 0, expected a failure"; exit 1; } ;;
  *) echo "expect.sh: STATUS is 0 or nonzero, not '$want'"; exit 2 ;;
esac
printf '%s\n' "$out" | grep -Eq -- "$regex" || { echo "expect.sh: exit status $status as expected, but no output line matches /$regex/"; exit 1; }
