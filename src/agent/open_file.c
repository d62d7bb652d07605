/*
 * open_file.c - per-fd table of open file descriptions (see open_file.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/open_file.h"
#include "agent/spin.h"
#include "graybox/device.h"

#define CHUNK_SLOTS 1024u
#define TOP_SLOTS   1024u          /* fds up to 1,048,575 */
#define SLAB_FILES  64u
#define DEVICE_CACHE 64u

static struct open_file **table[TOP_SLOTS];
static uint32_t table_lock;        /* only for growing the table         */
static struct open_file *free_list;
static uint32_t free_lock;

/* Device facts cost a few sysfs reads; a job touches few devices. */
static struct {
	dev_t dev;
	struct device_info info;
	int valid;
} device_cache[DEVICE_CACHE];
static uint32_t device_lock;
static unsigned device_next;     /* the slot to reuse next, when all are taken */

static struct open_file **slot_of(int fd, bool create)
{
	if (fd < 0 || (unsigned)fd >= CHUNK_SLOTS * TOP_SLOTS)
		return NULL;
	unsigned top = (unsigned)fd / CHUNK_SLOTS;
	struct open_file **chunk = __atomic_load_n(&table[top], __ATOMIC_ACQUIRE);
	if (!chunk) {
		if (!create)
			return NULL;
		spin_lock(&table_lock);
		chunk = table[top];
		if (!chunk) {
			/* mmap, not malloc: hooks may run where malloc is unsafe. */
			void *p = mmap(NULL, CHUNK_SLOTS * sizeof *chunk, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p != MAP_FAILED) {
				chunk = p;
				__atomic_store_n(&table[top], chunk, __ATOMIC_RELEASE);
			}
		}
		spin_unlock(&table_lock);
		if (!chunk)
			return NULL;
	}
	return &chunk[(unsigned)fd % CHUNK_SLOTS];
}

static struct open_file *file_alloc(void)
{
	spin_lock(&free_lock);
	if (!free_list) {
		struct open_file *slab = mmap(NULL, SLAB_FILES * sizeof *slab, PROT_READ | PROT_WRITE,
					      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (slab != MAP_FAILED)
			for (unsigned i = 0; i < SLAB_FILES; i++) {
				slab[i].next_free = free_list;
				free_list = &slab[i];
			}
	}
	struct open_file *of = free_list;
	if (of)
		free_list = of->next_free;
	spin_unlock(&free_lock);
	return of;
}

/* Called with of->lock held and refs at zero. */
static void file_recycle(struct open_file *of)
{
	cache_probe_close(&of->probe);
	spin_unlock(&of->lock);
	spin_lock(&free_lock);
	of->next_free = free_list;
	free_list = of;
	spin_unlock(&free_lock);
}

static void file_unref(struct open_file *of)
{
	if (!open_file_is_struct(of))
		return;
	spin_lock(&of->lock);
	if (--of->refs == 0)
		file_recycle(of);
	else
		spin_unlock(&of->lock);
}

static int device_lookup(int fd, dev_t dev, struct device_info *out)
{
	spin_lock(&device_lock);
	for (unsigned i = 0; i < DEVICE_CACHE; i++)
		if (device_cache[i].valid && device_cache[i].dev == dev) {
			*out = device_cache[i].info;
			spin_unlock(&device_lock);
			return 0;
		}
	spin_unlock(&device_lock);
	int rc = device_info_of_fd(fd, dev, out);
	if (rc < 0)
		return rc;
	/* A free slot, else the oldest entry: a backup that walks fifty btrfs
	 * snapshots (each an anonymous st_dev of its own) would otherwise
	 * ask sysfs again at every open once the table was full. */
	spin_lock(&device_lock);
	unsigned slot = 0;
	while (slot < DEVICE_CACHE && device_cache[slot].valid)
		slot++;
	if (slot == DEVICE_CACHE)
		slot = device_next++ % DEVICE_CACHE;
	device_cache[slot].dev = dev;
	device_cache[slot].info = *out;
	device_cache[slot].valid = 1;
	spin_unlock(&device_lock);
	return 0;
}

bool open_file_may_be_sparse(const struct stat *st)
{
	/* st_blocks counts 512-byte units allocated, delayed allocations
	 * included (ext4_getattr); a file of fewer than its size has holes
	 * (or is compressed: then FIEMAP shows its data and nothing is lost). */
	return (uint64_t)st->st_blocks * 512 < (uint64_t)st->st_size;
}

void open_file_set_flags(struct open_file *of, int flags)
{
	of->direct = (flags & O_DIRECT) != 0;
	of->append = (flags & O_APPEND) != 0;
	of->write_only = (flags & O_ACCMODE) == O_WRONLY;
}

bool open_file_net_unix;

/*
 * A socket's sentinel.  The family and type live in the socket, fixed at
 * socket(2) (sk_family, sk_type), so one answer per fd holds for its life.
 * The network is the internet families; AF_UNIX only under --net-unix
 * (segment.h DN_FLAG_NET_UNIX: local IPC is no link's traffic).  Streams
 * may be cut into pieces; everything record-oriented (UDP, SEQPACKET, raw
 * and ping sockets) is delayed whole.
 */
static struct open_file *classify_socket(int fd)
{
	int domain = 0, type = 0;
	socklen_t len = sizeof domain;
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0)
		return OPEN_FILE_NOT_DISK;
	len = sizeof type;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0)
		return OPEN_FILE_NOT_DISK;
	if (domain != AF_INET && domain != AF_INET6 && !(domain == AF_UNIX && open_file_net_unix))
		return OPEN_FILE_NOT_DISK;
	return type == SOCK_STREAM ? OPEN_FILE_NET_STREAM : OPEN_FILE_NET_DGRAM;
}

static struct open_file *classify(int fd, int open_flags)
{
	struct stat st;
	struct device_info dev;
	if (fstat(fd, &st) != 0)
		return OPEN_FILE_NOT_DISK;
	if (S_ISSOCK(st.st_mode))
		return classify_socket(fd);
	if (!S_ISREG(st.st_mode))
		return OPEN_FILE_NOT_DISK;
	if (device_lookup(fd, st.st_dev, &dev) < 0 || !dev.is_disk)
		return OPEN_FILE_NOT_DISK;
	struct open_file *of = file_alloc();
	if (!of)
		return OPEN_FILE_NOT_DISK;
	memset(of, 0, sizeof *of);
	of->refs = 1;
	of->dev = st.st_dev;
	of->ino = st.st_ino;
	of->isize = (uint64_t)st.st_size;
	of->eof_pos = UINT64_MAX;
	of->sparse = open_file_may_be_sparse(&st);
	open_file_set_flags(of, open_flags);
	of->pos_known = false;
	readahead_init(&of->ra, dev.ra_pages, dev.io_pages, dev.max_folio_order);
	of->copy_splices = dev.copy_splices != 0;
	of->overlay = dev.overlay != 0;
	cache_probe_init(&of->probe);
	/* Our probes must not start the kernel's readahead behind our
	 * model's back (cache_detector.h by_fault). */
	of->probe.by_fault = true;
	of->backend = !agent.seg  ? DN_CACHE_PROBE
		      : of->overlay ? cache_detector_choose(fd, agent.seg->cache_backend)
				    : cache_detector_choose_stat(fd, &st, agent.seg->cache_backend);
	return of;
}

void open_file_track(int fd, int open_flags, bool fresh)
{
	struct open_file **slot = slot_of(fd, true);
	if (!slot)
		return;
	struct open_file *of = classify(fd, open_flags);
	if (open_file_is_struct(of)) {
		/* A fresh open starts at offset 0; an inherited fd anywhere. */
		off_t pos = fresh ? 0 : lseek(fd, 0, SEEK_CUR);
		if (pos >= 0)
			open_file_pos_set(of, (uint64_t)pos);
		of->adopt = pos > 0;
	}
	file_unref(__atomic_exchange_n(slot, of, __ATOMIC_ACQ_REL));
}

bool open_file_maybe_disk(int fd)
{
	struct open_file **slot = slot_of(fd, false);
	struct open_file *of = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : NULL;
	return !of || of == OPEN_FILE_NOT_NET || open_file_is_struct(of);
}

bool open_file_seen(int fd)
{
	struct open_file **slot = slot_of(fd, false);
	struct open_file *of = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : NULL;
	return of && of != OPEN_FILE_NOT_NET;
}

bool open_file_maybe_net(int fd)
{
	struct open_file **slot = slot_of(fd, false);
	struct open_file *of = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : NULL;
	return !of || of == OPEN_FILE_NET_STREAM || of == OPEN_FILE_NET_DGRAM;
}

enum open_file_net open_file_net_kind(int fd)
{
	struct open_file **slot = slot_of(fd, true);
	if (!slot)
		return OPEN_FILE_NET_NONE;
	struct open_file *of = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!of) {
		/* Never seen: only as far as the network needs.  A file stays
		 * for the disk path to classify (NOT_NET), which it does only
		 * when a disk cap wants it (agent.h agent_disk_watches). */
		struct stat st;
		if (fstat(fd, &st) != 0)
			return OPEN_FILE_NET_NONE; /* not open: the real call says EBADF */
		of = S_ISSOCK(st.st_mode) ? classify_socket(fd) : OPEN_FILE_NOT_NET;
		struct open_file *expected = NULL;
		/* A racing classification of the same fd wins: it saw as much. */
		if (!__atomic_compare_exchange_n(slot, &expected, of, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			of = expected;
	}
	return of == OPEN_FILE_NET_STREAM ? OPEN_FILE_NET_IS_STREAM
	       : of == OPEN_FILE_NET_DGRAM ? OPEN_FILE_NET_IS_DGRAM : OPEN_FILE_NET_NONE;
}

/* Lock the struct in *slot, if it is still the one there once locked. */
static struct open_file *slot_acquire(struct open_file **slot)
{
	struct open_file *of = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!open_file_is_struct(of))
		return NULL;
	spin_lock(&of->lock);
	if (__atomic_load_n(slot, __ATOMIC_ACQUIRE) != of) {
		/* Lost a race with close(): the struct may belong to another
		 * file by now.  Treat the call as unaccounted. */
		spin_unlock(&of->lock);
		return NULL;
	}
	return of;
}

struct open_file *open_file_acquire(int fd)
{
	struct open_file **slot = slot_of(fd, true);
	if (!slot)
		return NULL;
	struct open_file *seen = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!seen || seen == OPEN_FILE_NOT_NET) {
		int flags = fcntl(fd, F_GETFL);
		if (flags < 0)
			return NULL; /* not open: let the real call say EBADF */
		open_file_track(fd, flags, false);
	}
	return slot_acquire(slot);
}

struct open_file *open_file_peek(int fd)
{
	struct open_file **slot = slot_of(fd, false);
	return slot ? slot_acquire(slot) : NULL;
}

void open_file_release(struct open_file *of)
{
	spin_unlock(&of->lock);
}

void open_file_dup(int oldfd, int newfd)
{
	struct open_file **from = slot_of(oldfd, false);
	struct open_file **to = slot_of(newfd, true);
	if (!to)
		return;
	struct open_file *of = from ? __atomic_load_n(from, __ATOMIC_ACQUIRE) : NULL;
	if (open_file_is_struct(of)) {
		spin_lock(&of->lock);
		of->refs++;
		spin_unlock(&of->lock);
	}
	file_unref(__atomic_exchange_n(to, of, __ATOMIC_ACQ_REL));
}

void open_file_forget(int fd)
{
	struct open_file **slot = slot_of(fd, false);
	if (slot)
		file_unref(__atomic_exchange_n(slot, NULL, __ATOMIC_ACQ_REL));
}

void open_file_forget_range(unsigned first, unsigned last)
{
	for (unsigned top = first / CHUNK_SLOTS; top < TOP_SLOTS && top <= last / CHUNK_SLOTS; top++) {
		struct open_file **chunk = __atomic_load_n(&table[top], __ATOMIC_ACQUIRE);
		if (!chunk)
			continue; /* never held anything: nothing to forget */
		for (unsigned i = 0; i < CHUNK_SLOTS; i++) {
			unsigned fd = top * CHUNK_SLOTS + i;
			if (fd >= first && fd <= last)
				file_unref(__atomic_exchange_n(&chunk[i], NULL, __ATOMIC_ACQ_REL));
		}
	}
}

void open_file_each(void (*fn)(void *ctx, int fd, struct open_file *of), void *ctx)
{
	for (unsigned top = 0; top < TOP_SLOTS; top++) {
		struct open_file **chunk = __atomic_load_n(&table[top], __ATOMIC_ACQUIRE);
		if (!chunk)
			continue;
		for (unsigned i = 0; i < CHUNK_SLOTS; i++) {
			int fd = (int)(top * CHUNK_SLOTS + i);
			struct open_file *of = slot_acquire(&chunk[i]);
			if (of) {
				fn(ctx, fd, of);
				open_file_release(of);
			}
		}
	}
}

uint32_t open_file_generation = 1;

void open_file_forget_positions(void)
{
	/* 0 is never a generation, so a zeroed struct never matches. */
	if (__atomic_add_fetch(&open_file_generation, 1, __ATOMIC_ACQ_REL) == 0)
		__atomic_add_fetch(&open_file_generation, 1, __ATOMIC_ACQ_REL);
}

void open_file_after_fork_child(void)
{
	/* Only this thread exists in the child: locks held by the parent's
	 * other threads will never be released. */
	table_lock = free_lock = device_lock = 0;
	for (unsigned top = 0; top < TOP_SLOTS; top++) {
		struct open_file **chunk = table[top];
		for (unsigned i = 0; chunk && i < CHUNK_SLOTS; i++)
			if (open_file_is_struct(chunk[i]))
				chunk[i]->lock = 0;
	}
}
