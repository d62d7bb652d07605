#!/bin/sh
# Runs each unit test binary with a timeout; exit 0 = pass, 77 = skip, else fail.
# Prints the closing line "N passed, N failed, N skipped".
pass=0 fail=0 skip=0
for t in "$@"; do
	name=$(basename "$t")
	out=$(timeout 120 "$t" 2>&1); rc=$?
	case $rc in
	0) pass=$((pass + 1)); echo "PASS $name" ;;
	77) skip=$((skip + 1)); echo "SKIP $name: $(printf '%s\n' "$out" | tail -n 1)" ;;
	*) fail=$((fail + 1)); echo "FAIL $name (exit $rc)"; printf '%s\n' "$out" | sed 's/^/    /' ;;
	esac
done
echo "unit: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
