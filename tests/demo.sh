#!/bin/sh
# The README's first command (`make demo`): a real regulated job, visibly.
# Reads a cold 64 MiB file with cat under a 16 MiB/s read cap, then shows
# what the kernel itself counted for the job next to discnice's prediction.
set -eu
build=${BUILD:-build}
scratch=${DISCNICE_TEST_DIR:-$build/scratch}
mkdir -p "$scratch"
file=$scratch/demo-64MiB
if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" -ne 67108864 ]; then
	dd if=/dev/urandom of="$file" bs=1M count=64 conv=fsync status=none
fi
# Make it cold without touching anybody else's cache: POSIX_FADV_DONTNEED.
cold() { dd if="$file" iflag=nocache count=0 status=none; }
now() { date +%s.%N; }

# The same read without discnice first, for comparison (a virtual disk the
# host caches may be far faster than a real one).
cold
t0=$(now)
cat "$file" > /dev/null
t1=$(now)
awk -v a="$t0" -v b="$t1" 'BEGIN { s = b - a; if (s <= 0) s = 1e-6;
	printf "without discnice: cat read 64 MiB in %.2f s (%.0f MiB/s)\n\n", s, 64 / s }'

cold
echo "\$ discnice run --read-rate 16MiB/s --report $scratch/demo.json -- cat $file > /dev/null"
"$build/discnice" run --read-rate 16MiB/s --report "$scratch/demo.json" -- cat "$file" > /dev/null
echo
echo "Report ($scratch/demo.json), actual_* measured by the kernel (/proc/PID/io):"
grep -E '"(elapsed_s|slept_s|file_read_bytes|predicted_read_bytes|actual_read_bytes|achieved_bps)"' \
	"$scratch/demo.json"
