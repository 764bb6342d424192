# `run_test_binaries NAME...`: each test binary /tmp/t/tests/NAME run on its own, one test at
# a time (at most 150 s), its output in $OUT/NAME.txt, and a line of its result (with the
# failed tests and their panics) on stdout. Sourced by the device scripts that run the GPU
# test binaries on NVIDIA (calls 45 and 66).
run_test_binaries() {
  local t start rc
  for t in "$@"; do
    start=$(date +%s)
    timeout 150 /tmp/t/tests/$t --test-threads 1 > "$OUT/$t.txt" 2>&1
    rc=$?
    echo "== $t: exit $rc in $(( $(date +%s) - start )) s :: $(grep -E '^test result' "$OUT/$t.txt" | cut -c1-90)"
    grep -E "^test .* FAILED$" "$OUT/$t.txt" | head -8
    [ $rc -ne 0 ] && grep -E "panicked at" -A2 "$OUT/$t.txt" | head -12
  done
  return 0
}
