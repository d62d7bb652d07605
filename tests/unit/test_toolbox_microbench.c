/* Description: gray toolbox microbenchmarks (graybox-icl §5) on a real disk - the page threshold sits between memory and disk, a page in memory is faster than a fresh one, a cold fault and a random read are slower than both, each benchmark reads what the kernel says it read, and bad arguments are refused. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <unistd.h>

#include "common/proc_io.h"
#include "graybox/toolbox/microbench.h"
#include "unit.h"

static void print_times(const char *what, const struct microbench_times *t)
{
	printf("%-16s median %7" PRIu64 " ns  p10 %7" PRIu64 "  p90 %7" PRIu64 "  p99 %7" PRIu64
	       "  (%u samples)\n", what, t->median_ns, t->p10_ns, t->p90_ns, t->p99_ns, t->samples);
}

int main(void)
{
	const char *dir = getenv("DISCNICE_TEST_DIR");
	struct statfs sfs;
	if (!dir || !*dir)
		dir = "./build/scratch";
	mkdir(dir, 0755);
	CHECK(statfs(dir, &sfs) == 0);
	if (sfs.f_type == TMPFS_MAGIC) {
		printf("skip: %s is tmpfs, where POSIX_FADV_DONTNEED cannot make pages cold\n", dir);
		return UNIT_SKIP;
	}

	struct microbench_memory mem;
	errno = 4242;
	CHECK(microbench_memory(4096, &mem) == 0);
	CHECK(errno == 4242);
	print_times("alloc+zero", &mem.alloc_zero);
	print_times("in memory", &mem.in_memory);
	CHECK_EQ_U64(mem.alloc_zero.samples, 4096);
	/* A write to a resident page is a store; a first touch is a fault
	 * that allocates and zeroes 4 KiB. */
	CHECK(mem.in_memory.median_ns < mem.alloc_zero.median_ns);
	struct microbench_memory none;
	CHECK(microbench_memory(0, &none) == -EINVAL);

	struct microbench_disk disk;
	struct proc_io before, after;
	bool have_io = proc_io_read(0, &before) == 0;
	CHECK(microbench_disk(dir, 16u << 20, 256, &disk) == 0);
	have_io = have_io && proc_io_read(0, &after) == 0;
	printf("sequential read  %.1f MiB/s over %" PRIu64 " MiB\n",
	       (double)disk.sequential_read_bps / (1 << 20), disk.file_bytes >> 20);
	print_times("random 4 KiB", &disk.random_read);
	print_times("page from disk", &disk.page_from_disk);
	CHECK(disk.sequential_read_bps > 0);
	CHECK(disk.page_from_disk.median_ns > mem.alloc_zero.median_ns);
	CHECK(disk.random_read.median_ns > mem.in_memory.median_ns);
	if (have_io) {
		/* The kernel's count: the sequential pass (16 MiB) plus one page
		 * per random read and per fault, and no more - MADV_RANDOM and
		 * FADV_RANDOM turned readahead off. */
		uint64_t read = after.read_bytes - before.read_bytes;
		uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
		printf("read_bytes %" PRIu64 " (expected %" PRIu64 ")\n", read,
		       (UINT64_C(16) << 20) + 512 * page);
		CHECK(read >= (UINT64_C(16) << 20) + 512 * page);
		CHECK(read <= (UINT64_C(16) << 20) + 512 * page + (UINT64_C(1) << 20));
	}

	uint64_t t = microbench_page_threshold(&mem, &disk);
	printf("page threshold   %" PRIu64 " ns\n", t);
	CHECK(t > mem.alloc_zero.median_ns && t < disk.page_from_disk.median_ns);

	CHECK(microbench_disk(dir, 1u << 20, 16, &disk) == -EINVAL);      /* too small */
	CHECK(microbench_disk(dir, 16u << 20, 4096, &disk) == -EINVAL);   /* too many reads */
	CHECK(microbench_disk("/nonexistent/discnice", 16u << 20, 16, &disk) == -ENOENT);
	return 0;
}
