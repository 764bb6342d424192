# `wg TRACE CONF ARGS BUILD`: one `replay --gpu --json` of /tmp/traces/TRACE.csv by
# .dev/BUILD, its report appended to $OUT/replay.jsonl with the trace, $round, the
# configuration, the arguments and the build, and one line of its figures on stderr. Sourced
# by device scripts from call 53 on (after device-env.sh and prepare-traces.sh); it empties
# $OUT/replay.jsonl when sourced.
: > "$OUT/replay.jsonl"
wg() {
  out=$(timeout 90 .dev/$4 replay /tmp/traces/$1.csv --gpu --json $3 --conf "$2" 2>/dev/null)
  python3 -c "
import json,sys
r=json.loads(sys.argv[1]); r['trace']='$1'; r['round']='$round'; r['conf_given']='$2'; r['args']='$3'; r['build']='$4'
print(json.dumps(r))
f=r['runs'][0]; m=r['rest_median'] or f
print('$round $4 $1 $2 $3 bias %s first wall %.3f drv %.3f; rest pool %.1f engine %.1f ratio %.3f' % (r.get('owner_bias'), f['replay_time_s'], f['driver_time_s'], m['pool_ns_per_op'], r['engine_ns_per_op'], m['pool_ns_per_op']/r['engine_ns_per_op']), file=sys.stderr)
" "$out" >> "$OUT/replay.jsonl" || echo "$1 $2 $4: no report"
}
