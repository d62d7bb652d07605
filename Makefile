# discnice - user-level regulation of disk bandwidth.
#
#   make                 build build/discnice and build/libdiscnice.so
#   make demo            build, then run a real regulated job visibly
#   make test            unit tests (ASan+UBSan), integration tests (pytest), and
#                        the reliability battery with the agent under ASan+UBSan
#   make bench-predict   prediction error, six micro-benchmarks (bench/predict.py)
#   make bench-rate      achieved rate against the cap: 13 caps x 4 workloads, feedback on
#                        and off (bench/rate_sweep.py, 17-35 min), then the fixed-cap table (bench/rate.py)
#   make bench-overhead  cost at cap = inf, and of the feedback (bench/overhead.py)
#   make bench-attach    discnice attach: a running job at its cap (bench/attach.py)
#   make bench-yield     --policy yield: reaction, foreground slowdown, share (bench/yield.py)
#   make bench-cache     --cache drop: a foreground's hot set beside a stream (bench/cache.py)
#   make bench-manners   MS Manners' experiments (paper §9): foreground slowdown beside each
#                        form, idle overhead, overshoot, calibration (bench/manners.py)
#   make bench-manners-threads  MS Manners §9.5: two regulated threads on two emulated
#                        disks beside dummy loads (bench/manners_threads.py, root, ~5 min)
#   make bench / bench-quick   the full evaluation (bench/evaluate.py)
#   make bench-emulated  E1, E4, E6 again on an emulated 50 MB/s, 150 IOPS disk: ext4 on a
#                        loop device under cgroup-v1 blkio throttle rules (bench/loopfs.py,
#                        root; <= 40 min; ARGS=--quick for a ~5 min smoke run); this VM's
#                        own disk is cached by its host and hides contention
#   make install PREFIX=/usr/local
#
# The layout is the architecture: src/agent (interposition, throttling),
# src/graybox (cache detector, read/write-size predictors), src/policy
# (rate window), src/manners (MS Manners' progress-based regulation: sign test,
# suspension, calibration, regression; pure logic), src/common (segment,
# rates, clocks), src/tool (the CLI).

CC       ?= cc
PREFIX   ?= /usr/local
# The public libraries and their pkg-config files (lib64, lib/x86_64-linux-gnu
# where a distribution wants them); the agent stays in PREFIX/lib/discnice,
# where discnice looks for it beside itself.
LIBDIR   ?= $(PREFIX)/lib
BUILD    ?= build
PYTHON   ?= python3

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wformat=2 -Wno-format-nonliteral
# What the code needs is appended with override, so that flags given on
# the command line (make CFLAGS="-O2 -g", dpkg-buildflags) add to it, not
# replace it; LDFLAGS (-Wl,-z,now, ...) goes into every link.
CFLAGS   ?= -O2 -g
override CPPFLAGS += -D_GNU_SOURCE -Iinclude -Isrc
override CFLAGS   += -std=c11 $(WARN) -fvisibility=hidden -fPIC -pthread
LDLIBS   := -ldl -pthread

CORE_SRC  := $(wildcard src/common/*.c src/graybox/*.c src/graybox/toolbox/*.c src/policy/*.c src/manners/*.c)
# The gray-box ICL paper's three services (issue #11): FCCD (gbp's cache-aware
# order), FLDC (layout order, refresh), MAC (gb_alloc).  The tool and
# libgraybox link them; the agent does not.
GRAYBOX_SVC_SRC := $(wildcard src/graybox/fccd/*.c src/graybox/fldc/*.c src/graybox/mac/*.c)
AGENT_SRC := $(wildcard src/agent/*.c)
TOOL_SRC  := $(wildcard src/tool/*.c)
UNIT_SRC  := $(wildcard tests/unit/test_*.c)
# Small hostile programs the integration tests regulate (tests/programs/README).
PROG_SRC  := $(wildcard tests/programs/*.c)
PROG_BIN  := $(patsubst tests/programs/%.c,$(BUILD)/tests/programs/%,$(PROG_SRC))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
CORE_OBJ  := $(call obj,$(CORE_SRC))
AGENT_OBJ := $(call obj,$(AGENT_SRC))
TOOL_OBJ  := $(call obj,$(TOOL_SRC))
GRAYBOX_SVC_OBJ := $(call obj,$(GRAYBOX_SVC_SRC))

# Unit tests are built apart with sanitizers (CONVENTIONS: sanitizers in the test run).
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
SAN_CORE_OBJ := $(patsubst %.c,$(BUILD)/san/%.o,$(CORE_SRC))
# The services are unit-tested too, but never linked into the agent.
SAN_SVC_OBJ  := $(patsubst %.c,$(BUILD)/san/%.o,$(GRAYBOX_SVC_SRC))
UNIT_BIN  := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
# The tool's pure parts (no I/O but what they are given), unit-tested too;
# and tool_msg.c, whose option parsing prints only on bad usage.
TOOL_PURE_SRC := src/tool/tool_json.c src/tool/tool_msg.c
SAN_TOOL_PURE_OBJ := $(patsubst %.c,$(BUILD)/san/%.o,$(TOOL_PURE_SRC))

.PHONY: all demo test unit integration integration-asan programs compilers clean install bench-predict bench-rate bench-rate-peeked bench-overhead bench-yield bench-writeback bench-attach bench-cache bench-manners bench-manners-threads bench-quick bench bench-emulated
# One agent per platform, named in LD_PRELOAD through the loader's
# $PLATFORM (tool_run.c: preload_path): DIR/x86_64/ is the agent, DIR/i686/
# an empty ELF32 object, so that 32-bit programs of a job load something
# valid and the loader prints no "wrong ELF class" line.  Binutils alone
# builds it: no 32-bit C toolchain is needed.  ld.so's $PLATFORM is not
# always the kernel's AT_PLATFORM: glibc 2.26 to 2.36 say "haswell" or
# "xeon_phi" for a 64-bit program on an Intel CPU with their features, and
# "i586" for a 32-bit one on a CPU without i686's (sysdeps/x86/cpu-features.c,
# init_cpu_features; `ld.so --help` names the one in use).  Every name gets
# its directory, or a job on such a CPU runs without the agent.
ifeq ($(shell uname -m),x86_64)
AGENT_PLATFORMS_64 := x86_64 haswell xeon_phi
AGENT_PLATFORMS_32 := i686 i586
PLATFORM_AGENTS := $(foreach p,$(AGENT_PLATFORMS_64) $(AGENT_PLATFORMS_32),$(BUILD)/$(p)/libdiscnice.so)
endif

all: $(BUILD)/discnice $(BUILD)/libdiscnice.so $(PLATFORM_AGENTS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/san/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN_FLAGS) -MMD -MP -c -o $@ $<

# The agent: only the interposed libc names are exported (version script,
# hidden visibility), and -z defs catches a missing symbol at link time.
$(BUILD)/libdiscnice.so: $(AGENT_OBJ) $(CORE_OBJ) src/agent/libdiscnice.map
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -Wl,--version-script=src/agent/libdiscnice.map -Wl,-z,defs \
	      -Wl,-z,now -o $@ $(AGENT_OBJ) $(CORE_OBJ) $(LDLIBS)

$(foreach p,$(AGENT_PLATFORMS_64),$(BUILD)/$(p)/libdiscnice.so): $(BUILD)/libdiscnice.so
	@mkdir -p $(dir $@)
	ln -sf ../libdiscnice.so $@
$(BUILD)/i686/libdiscnice.so:
	@mkdir -p $(dir $@)
	printf '' | as --32 -o $(BUILD)/i686/empty.o
	ld -m elf_i386 -shared -soname libdiscnice.so -o $@ $(BUILD)/i686/empty.o
$(foreach p,$(filter-out i686,$(AGENT_PLATFORMS_32)),$(BUILD)/$(p)/libdiscnice.so): $(BUILD)/i686/libdiscnice.so
	@mkdir -p $(dir $@)
	ln -sf ../i686/libdiscnice.so $@

$(BUILD)/discnice: $(TOOL_OBJ) $(CORE_OBJ) $(GRAYBOX_SVC_OBJ)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(CORE_OBJ) $(GRAYBOX_SVC_OBJ) $(LDLIBS) -lm

# The agent itself under ASan+UBSan, preloaded into unsanitized programs by
# `make integration-asan`.  The ASan runtime then does not come first in the
# program's library list, so it checks the agent's own code (its stack,
# globals, mmap'd tables, every UB check) but not the program's heap.
SAN_AGENT_OBJ := $(patsubst %.c,$(BUILD)/san/%.o,$(AGENT_SRC))
$(BUILD)/san/libdiscnice.so: $(SAN_AGENT_OBJ) $(SAN_CORE_OBJ) src/agent/libdiscnice.map
	$(CC) $(CFLAGS) $(LDFLAGS) $(SAN_FLAGS) -shared -Wl,--version-script=src/agent/libdiscnice.map \
	      -Wl,-z,defs -Wl,-z,now -o $@ $(SAN_AGENT_OBJ) $(SAN_CORE_OBJ) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(SAN_CORE_OBJ) $(SAN_SVC_OBJ) $(SAN_TOOL_PURE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(SAN_FLAGS) -o $@ $< $(SAN_CORE_OBJ) $(SAN_SVC_OBJ) \
	      $(SAN_TOOL_PURE_OBJ) $(LDLIBS) -lm

# Test programs: plain C, never linked with the agent (it is preloaded).
# static_*.c are linked statically: LD_PRELOAD cannot reach them, so only
# the supervisor's regulation from outside holds them.
$(BUILD)/tests/programs/static_%: tests/programs/static_%.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -static -o $@ $<

# fortified_*.c as Debian builds its packages: glibc's _chk entry points.
$(BUILD)/tests/programs/fortified_%: tests/programs/fortified_%.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2 -o $@ $<

$(BUILD)/tests/programs/%: tests/programs/%.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -o $@ $< -ldl

programs: $(PROG_BIN)

# Benchmark helpers: plain programs, not linked with the agent.
$(BUILD)/bench/microbench: bench/microbench.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=c11 -Wall -Wextra -Werror -o $@ $<

# The build quietly (its warnings still show), then the job.
demo:
	@$(MAKE) --no-print-directory -s all
	@sh tests/demo.sh

unit: $(UNIT_BIN)
	@sh tests/run-unit.sh $(UNIT_BIN)

# pytest lives in a private venv so `make test` needs nothing preinstalled.
VENV := $(BUILD)/venv
$(VENV)/.ok: tests/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r tests/requirements.txt
	@touch $@

# Many of these tests judge a regulated job by the kernel's clock and counts
# on a shared 2-CPU VM, and a few have failed once in a run and never again
# (each is named in the closing notes).  A test that fails is run once more
# (pytest-rerunfailures): the summary (-rR) names it under RERUN with the
# first attempt's traceback, so a flake leaves its cause in the CI log, and
# one that fails twice fails the run.
integration: all programs $(VENV)/.ok
	DISCNICE_BUILD=$(abspath $(BUILD)) $(VENV)/bin/python -m pytest -q -raR --reruns 1 \
	    --rerun-show-tracebacks --reruns-delay 2 tests/integration

# The reliability battery again, with the sanitized agent preloaded.
ASAN_ENV := ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0:exitcode=99 \
	    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
integration-asan: all programs $(BUILD)/san/libdiscnice.so $(VENV)/.ok
	$(ASAN_ENV) DISCNICE_BUILD=$(abspath $(BUILD)) \
	DISCNICE_AGENT=$(abspath $(BUILD))/san/libdiscnice.so \
	$(VENV)/bin/python -m pytest -q -ra tests/integration/test_reliability_agent.py \
	    tests/integration/test_robustness.py

# The warnings as errors under clang too, and with a distribution's
# hardening flags (dpkg-buildflags; Ubuntu's compilers fortify by
# default): _FORTIFY_SOURCE renames or inlines libc names the agent wraps.
HARDENED_FLAGS := CPPFLAGS=-D_FORTIFY_SOURCE=2 \
	CFLAGS="-O2 -g -fstack-protector-strong -Wformat -Werror=format-security" \
	LDFLAGS="-Wl,-z,relro -Wl,-z,now"
compilers:
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/hardened $(HARDENED_FLAGS) all >/dev/null && \
		echo "gcc build with hardening flags: ok"
	@if command -v clang >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory BUILD=$(BUILD)/clang CC=clang \
		    CPPFLAGS=-D_FORTIFY_SOURCE=3 all >/dev/null && \
		echo "clang build (with _FORTIFY_SOURCE=3): ok"; \
	else echo "clang build: skipped (clang not installed)"; fi

test: all compilers unit integration integration-asan

bench-predict: all $(BUILD)/bench/microbench $(VENV)/.ok
	$(VENV)/bin/python bench/predict.py $(ARGS)

bench-rate: all $(BUILD)/bench/microbench $(VENV)/.ok
	$(VENV)/bin/python bench/rate_sweep.py $(ARGS)
	$(VENV)/bin/python bench/rate.py $(ARGS)

# Caps on files whose start another process read first (bench/rate_peeked.py).
bench-rate-peeked: all $(VENV)/.ok
	$(VENV)/bin/python bench/rate_peeked.py $(ARGS)

# Timing helpers of the overhead bench (bench/alternate.c, bench/spawn_wait.c).
$(BUILD)/bench/alternate $(BUILD)/bench/spawn_wait: $(BUILD)/bench/%: bench/%.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=c11 -Wall -Wextra -Werror -o $@ $<

bench-overhead: all $(BUILD)/bench/microbench $(BUILD)/bench/alternate $(BUILD)/bench/spawn_wait $(VENV)/.ok
	$(VENV)/bin/python bench/overhead.py $(ARGS)

# Paced writeback (issue #9 §1): the disk's own count, on a loop device (root).
bench-writeback: all $(BUILD)/bench/microbench $(VENV)/.ok
	$(VENV)/bin/python bench/writeback.py $(ARGS)

# discnice attach (issue #9 item 5): a running job at its cap, by the kernel.
bench-attach: all $(VENV)/.ok
	$(VENV)/bin/python bench/attach.py $(ARGS)

# --cache drop (issue #9 item 4): a foreground's hot set beside a streaming
# background in one memory cgroup v1, on a loop device (root).
bench-cache: all $(VENV)/.ok
	$(VENV)/bin/python bench/cache.py $(ARGS)

# MS Manners' experiments (issue #10, the paper's §9): the cpu scenario on
# one pinned CPU, the disk scenario on an emulated disk (root) with jdupes.
bench-manners: all $(VENV)/.ok
	$(VENV)/bin/pip install -q -r bench/requirements.txt
	@command -v jdupes >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jdupes >/dev/null; } || true
	$(VENV)/bin/python bench/manners.py $(ARGS)

# MS Manners §9.5 (Fig. 9): two regulated threads of one process on two
# emulated disks (root), beside dummy disk and CPU loads.
$(BUILD)/bench/manners_threads: bench/manners_threads.c $(BUILD)/libmanners.so include/discnice/manners.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -Iinclude -o $@ $< \
	      -L$(BUILD) -lmanners -Wl,-rpath,$(abspath $(BUILD))
bench-manners-threads: all $(BUILD)/bench/manners_threads $(VENV)/.ok
	$(VENV)/bin/pip install -q -r bench/requirements.txt
	$(VENV)/bin/python bench/manners_threads.py $(ARGS)

bench-yield: all $(VENV)/.ok
	$(VENV)/bin/pip install -q -r bench/requirements.txt
	$(VENV)/bin/python bench/yield.py $(ARGS)

# The evaluation (issue #3): every DiscNice experiment beside the kernel's
# own controls; bench/results/DATE-HOST.md plus PNG plots.
bench: all $(BUILD)/bench/microbench $(VENV)/.ok
	$(VENV)/bin/pip install -q -r bench/requirements.txt
	$(VENV)/bin/python bench/evaluate.py

bench-quick: all $(BUILD)/bench/microbench $(VENV)/.ok
	$(VENV)/bin/pip install -q -r bench/requirements.txt
	$(VENV)/bin/python bench/evaluate.py --quick

# Contention that this machine can show (issue #9 §7): the workspace on an
# emulated disk (bench/loopfs.py LoopFs(throttle=HDD)), always torn down.
bench-emulated: all $(BUILD)/bench/microbench $(VENV)/.ok
	$(VENV)/bin/pip install -q -r bench/requirements.txt
	$(VENV)/bin/python bench/evaluate.py --emulated $(ARGS)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/discnice $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(BUILD)/discnice $(DESTDIR)$(PREFIX)/bin/discnice
	install -m 644 $(BUILD)/libdiscnice.so $(DESTDIR)$(PREFIX)/lib/discnice/libdiscnice.so
	for p in $(AGENT_PLATFORMS_64); do \
		install -d $(DESTDIR)$(PREFIX)/lib/discnice/$$p && \
		ln -sf ../libdiscnice.so $(DESTDIR)$(PREFIX)/lib/discnice/$$p/libdiscnice.so || exit 1; \
	done
	if [ -n "$(AGENT_PLATFORMS_32)" ]; then \
		install -d $(DESTDIR)$(PREFIX)/lib/discnice/i686 && \
		install -m 644 $(BUILD)/i686/libdiscnice.so $(DESTDIR)$(PREFIX)/lib/discnice/i686/libdiscnice.so; \
	fi
	for p in $(filter-out i686,$(AGENT_PLATFORMS_32)); do \
		install -d $(DESTDIR)$(PREFIX)/lib/discnice/$$p && \
		ln -sf ../i686/libdiscnice.so $(DESTDIR)$(PREFIX)/lib/discnice/$$p/libdiscnice.so || exit 1; \
	done
	install -m 644 man/discnice.1 $(DESTDIR)$(PREFIX)/share/man/man1/discnice.1

# A static library exports what its shared twin does (its version script):
# the objects are linked into one (ld -r) and every hidden symbol is made
# local, so that a program linked with it cannot collide with an internal
# name (proc_read_small, multiplex_join, ...).  -fvisibility=hidden marks
# everything that is not an exported API function.
define sealed_archive
	rm -f $@ $@.o
	$(LD) -r -o $@.o $^
	$(OBJCOPY) --localize-hidden $@.o
	ar rcs $@ $@.o
	rm -f $@.o
endef
OBJCOPY ?= objcopy

# A library's pkg-config file from its template: $(1) the version, $(2) the
# template.
pc_from = sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@VERSION@|$(1)|' $(2)

# A public library into LIBDIR: $(1) its name (manners, graybox), $(2) its
# soname, $(3) its version, $(4) its pkg-config template.  The .pc is made
# again here: build/NAME.pc may carry the PREFIX of an earlier `make`.
define install_library
	install -m 755 $(BUILD)/$(2) $(DESTDIR)$(LIBDIR)/$(2)
	ln -sf $(2) $(DESTDIR)$(LIBDIR)/lib$(1).so
	install -m 644 $(BUILD)/lib$(1).a $(DESTDIR)$(LIBDIR)/lib$(1).a
	$(call pc_from,$(3),$(4)) > $(DESTDIR)$(LIBDIR)/pkgconfig/$(1).pc
	chmod 644 $(DESTDIR)$(LIBDIR)/pkgconfig/$(1).pc
endef

# ---- libmanners: the MS Manners testpoint library (issue #10 §1) --------------
# build/libmanners.so (soname libmanners.so.0, only manners_* of
# include/discnice/manners.h exported), build/libmanners.a, build/manners.pc;
# the pure logic of src/manners/*.c plus the runtime of src/manners/library/.
MANNERS_SONAME    := libmanners.so.0
MANNERS_VERSION   := 0.1.0
MANNERS_PURE_OBJ  := $(call obj,$(wildcard src/manners/*.c) src/common/machine_activity.c src/common/proc_io.c)
MANNERS_LIB_OBJ   := $(call obj,$(wildcard src/manners/library/*.c))
MANNERS_PROG_SRC  := $(wildcard tests/programs/manners/*.c)
MANNERS_PROG_BIN  := $(patsubst tests/programs/manners/%.c,$(BUILD)/tests/programs/manners/%,$(MANNERS_PROG_SRC)) \
		     $(BUILD)/tests/programs/manners/example_static
# Where `make install` puts the Python module: a directory the system's
# python3 searches (Debian: /usr/lib/python3/dist-packages for /usr,
# PREFIX/lib/python3.X/dist-packages for /usr/local and others).
PYTHON_VERSION    = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# PREFIX=$$HOME/.local, python3's user base: its user site directory
# (lib/python3.X/site-packages, searched without PYTHONPATH).
PYTHON_USER_BASE  = $(shell $(PYTHON) -m site --user-base 2>/dev/null)
# (PREFIX compared without a trailing slash: PREFIX=$$HOME/.local/ too.)
PREFIX_PLAIN      = $(patsubst %/,%,$(PREFIX))
PYTHON_SITE      ?= $(if $(filter /usr,$(PREFIX_PLAIN)),/usr/lib/python3/dist-packages,$(if \
		    $(filter $(PYTHON_USER_BASE),$(PREFIX_PLAIN)),$(shell $(PYTHON) -m site --user-site),$(PREFIX_PLAIN)/lib/python$(PYTHON_VERSION)/dist-packages))

.PHONY: manners install-manners
manners: $(BUILD)/libmanners.so $(BUILD)/libmanners.a $(BUILD)/manners.pc
all: manners

# -z nodelete: each thread that made a testpoint holds a pthread key whose
# destructor is in the library; unloaded by dlclose(), such a thread crashed
# at its exit (a plug-in host).  The library stays mapped instead.
$(BUILD)/$(MANNERS_SONAME): $(MANNERS_LIB_OBJ) $(MANNERS_PURE_OBJ) src/manners/library/libmanners.map
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -Wl,-soname,$(MANNERS_SONAME) \
	      -Wl,--version-script=src/manners/library/libmanners.map -Wl,-z,defs -Wl,-z,now \
	      -Wl,-z,nodelete \
	      -o $@ $(MANNERS_LIB_OBJ) $(MANNERS_PURE_OBJ) -pthread -lm
$(BUILD)/libmanners.so: $(BUILD)/$(MANNERS_SONAME)
	ln -sf $(MANNERS_SONAME) $@
$(BUILD)/libmanners.a: $(MANNERS_LIB_OBJ) $(MANNERS_PURE_OBJ)
	$(sealed_archive)
$(BUILD)/manners.pc: src/manners/library/manners.pc.in Makefile
	@mkdir -p $(dir $@)
	$(call pc_from,$(MANNERS_VERSION),$<) > $@

# Test programs and examples linked with the library (the shared one; the
# static example proves the .a links alone).
$(BUILD)/tests/programs/manners/%: tests/programs/manners/%.c $(BUILD)/libmanners.so include/discnice/manners.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -Iinclude -Isrc -o $@ $< \
	      -L$(BUILD) -lmanners -Wl,-rpath,$(abspath $(BUILD))
$(BUILD)/tests/programs/manners/example_static: examples/manners/checksum_files.c $(BUILD)/libmanners.a
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -Iinclude -o $@ $< \
	      $(BUILD)/libmanners.a -pthread -lm
programs: $(MANNERS_PROG_BIN)

install: install-manners
install-manners: manners
	install -d $(DESTDIR)$(PREFIX)/include/discnice $(DESTDIR)$(LIBDIR)/pkgconfig \
	           $(DESTDIR)$(PREFIX)/share/man/man3 $(DESTDIR)$(PYTHON_SITE)
	install -m 644 include/discnice/manners.h $(DESTDIR)$(PREFIX)/include/discnice/manners.h
	$(call install_library,manners,$(MANNERS_SONAME),$(MANNERS_VERSION),src/manners/library/manners.pc.in)
	install -m 644 man/manners.3 $(DESTDIR)$(PREFIX)/share/man/man3/manners.3
	sed 's|^_INSTALLED_LIBRARY = .*|_INSTALLED_LIBRARY = "$(LIBDIR)/$(MANNERS_SONAME)"|' \
	    python/discnice_manners.py > $(DESTDIR)$(PYTHON_SITE)/discnice_manners.py
	chmod 644 $(DESTDIR)$(PYTHON_SITE)/discnice_manners.py
# ---- end libmanners -----------------------------------------------------------

# `man 3 manners_testpoint`, `man 3 gbp_order`: each function's name is a
# .so link to its page.
MAN3_LINKS := manners:manners_testpoint manners:manners_resume manners:manners_set_priority \
	      manners:manners_leave manners:manners_config_set manners:manners_config_get \
	      manners:manners_stats manners:manners_save gbp:gbp_order gbp:gbp_free \
	      gbp:gbp_backend_name gb_alloc:gb_free
.PHONY: install-man3-links
install: install-man3-links
install-man3-links: install-manners $(if $(GRAYBOX_SVC_OBJ),install-graybox)
	for l in $(MAN3_LINKS); do \
		echo ".so man3/$${l%%:*}.3" > $(DESTDIR)$(PREFIX)/share/man/man3/$${l#*:}.3; \
	done

# What the install targets put in place, and nothing else (and the bytecode
# python3 wrote beside the module when it was imported); empty directories
# they made are left (rmdir -p would walk into PREFIX's own).
.PHONY: uninstall
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/discnice $(DESTDIR)$(PREFIX)/share/man/man1/discnice.1
	for p in $(AGENT_PLATFORMS_64) $(AGENT_PLATFORMS_32); do \
		rm -f $(DESTDIR)$(PREFIX)/lib/discnice/$$p/libdiscnice.so; \
		rmdir $(DESTDIR)$(PREFIX)/lib/discnice/$$p 2>/dev/null || true; \
	done
	rm -f $(DESTDIR)$(PREFIX)/lib/discnice/libdiscnice.so \
	      $(DESTDIR)$(PREFIX)/lib/discnice/slurm/discnice.so \
	      $(DESTDIR)$(PREFIX)/lib/discnice/slurm/discnice-slurm-task
	rmdir $(DESTDIR)$(PREFIX)/lib/discnice/slurm $(DESTDIR)$(PREFIX)/lib/discnice 2>/dev/null || true
	rm -f $(DESTDIR)$(PREFIX)/include/discnice/manners.h \
	      $(addprefix $(DESTDIR)$(PREFIX)/,$(GRAYBOX_HEADERS))
	rmdir $(DESTDIR)$(PREFIX)/include/discnice 2>/dev/null || true
	rm -f $(DESTDIR)$(LIBDIR)/$(MANNERS_SONAME) $(DESTDIR)$(LIBDIR)/libmanners.so \
	      $(DESTDIR)$(LIBDIR)/libmanners.a $(DESTDIR)$(LIBDIR)/pkgconfig/manners.pc \
	      $(DESTDIR)$(LIBDIR)/$(GRAYBOX_SONAME) $(DESTDIR)$(LIBDIR)/libgraybox.so \
	      $(DESTDIR)$(LIBDIR)/libgraybox.a $(DESTDIR)$(LIBDIR)/pkgconfig/graybox.pc \
	      $(DESTDIR)$(PREFIX)/share/man/man3/manners.3 $(DESTDIR)$(PREFIX)/share/man/man3/gbp.3 \
	      $(DESTDIR)$(PREFIX)/share/man/man3/gb_alloc.3 \
	      $(foreach l,$(MAN3_LINKS),$(DESTDIR)$(PREFIX)/share/man/man3/$(lastword $(subst :, ,$(l))).3) \
	      $(DESTDIR)$(PYTHON_SITE)/discnice_manners.py \
	      $(DESTDIR)$(PYTHON_SITE)/__pycache__/discnice_manners.*.pyc
	rmdir $(DESTDIR)$(PYTHON_SITE)/__pycache__ 2>/dev/null || true

clean:
	rm -rf $(BUILD)

.SECONDARY:

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ---- libgraybox: the gray-box ICL services as a library (issue #11) -------
# build/libgraybox.so (soname libgraybox.so.0; only the names listed in
# src/graybox/library/libgraybox.map are exported; `discnice refresh`'s
# engine, which no library call reaches, is left out), build/libgraybox.a,
# build/graybox.pc.  Public headers: include/discnice/gbp.h (FCCD/FLDC
# order, §4.1.2) and include/discnice/gb_alloc.h (MAC, §4.3).
GRAYBOX_SONAME    := libgraybox.so.0
GRAYBOX_VERSION   := 0.1.0
GRAYBOX_LIB_OBJ   := $(call obj,$(wildcard src/graybox/library/*.c src/graybox/toolbox/*.c src/graybox/cache_detector.c \
			src/graybox/device.c src/graybox/extent_map.c src/common/private_fd.c)) \
		     $(filter-out $(BUILD)/obj/src/graybox/fldc/refresh%,$(GRAYBOX_SVC_OBJ))
GRAYBOX_HEADERS   := $(wildcard include/discnice/gbp.h include/discnice/gb_alloc.h)
# The toolbox's probe-threshold microbenchmark checks a miss's read_bytes
# in /proc/self/io (proc_io.c).
GRAYBOX_LIB_OBJ   += $(call obj,src/common/proc_io.c)

.PHONY: graybox install-graybox
ifneq ($(GRAYBOX_SVC_OBJ),)
graybox: $(BUILD)/libgraybox.so $(BUILD)/libgraybox.a $(BUILD)/graybox.pc
all: graybox
install: install-graybox
endif

$(BUILD)/$(GRAYBOX_SONAME): $(GRAYBOX_LIB_OBJ) src/graybox/library/libgraybox.map
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -Wl,-soname,$(GRAYBOX_SONAME) \
	      -Wl,--version-script=src/graybox/library/libgraybox.map -Wl,-z,defs -Wl,-z,now \
	      -o $@ $(GRAYBOX_LIB_OBJ) -pthread -lm
$(BUILD)/libgraybox.so: $(BUILD)/$(GRAYBOX_SONAME)
	ln -sf $(GRAYBOX_SONAME) $@
$(BUILD)/libgraybox.a: $(GRAYBOX_LIB_OBJ)
	$(sealed_archive)
$(BUILD)/graybox.pc: src/graybox/library/graybox.pc.in Makefile
	@mkdir -p $(dir $@)
	$(call pc_from,$(GRAYBOX_VERSION),$<) > $@

# Test programs linked with the library (the shared one).
GRAYBOX_PROG_BIN  := $(patsubst tests/programs/graybox/%.c,$(BUILD)/tests/programs/graybox/%,$(wildcard tests/programs/graybox/*.c))
$(BUILD)/tests/programs/graybox/%: tests/programs/graybox/%.c $(BUILD)/libgraybox.so $(GRAYBOX_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -Iinclude -o $@ $< \
	      -L$(BUILD) -lgraybox -Wl,-rpath,$(abspath $(BUILD))
programs: $(GRAYBOX_PROG_BIN)

install-graybox: graybox
	install -d $(DESTDIR)$(PREFIX)/include/discnice $(DESTDIR)$(LIBDIR)/pkgconfig
	for h in $(GRAYBOX_HEADERS); do install -m 644 $$h $(DESTDIR)$(PREFIX)/$$h; done
	$(call install_library,graybox,$(GRAYBOX_SONAME),$(GRAYBOX_VERSION),src/graybox/library/graybox.pc.in)

# gb_alloc(3): MAC's man page (issue #11 §3), installed with libgraybox.
.PHONY: install-graybox-man
install-graybox: install-graybox-man
install-graybox-man:
	install -d $(DESTDIR)$(PREFIX)/share/man/man3
	install -m 644 man/gb_alloc.3 $(DESTDIR)$(PREFIX)/share/man/man3/gb_alloc.3
	install -m 644 man/gbp.3 $(DESTDIR)$(PREFIX)/share/man/man3/gbp.3
# graybox-icl Fig 6 (issue #11 §2): aging epochs and `discnice refresh` at
# epoch 31, on this VM's disk and on a loop-device ext4 (root; torn down).
.PHONY: bench-graybox-refresh
bench-graybox-refresh: all
	$(PYTHON) bench/graybox_refresh.py $(ARGS)
# gbp (issue #11 §1): the gray-box ICL paper's Figs 2-5 - scans in a memory
# cgroup v1 on an emulated 50 MB/s disk, probe accuracy against cachestat,
# small-file layout orders (bench/graybox.py, root; ARGS=--quick ~5 min).
.PHONY: bench-graybox
bench-graybox: all $(VENV)/.ok
	$(VENV)/bin/python bench/graybox.py $(ARGS)
# Fig 3's grep with two gbp backends side by side, alternating (probe
# overhead, issue #11; bench/graybox_backends.py, root; ~6 min).
.PHONY: bench-graybox-backends
bench-graybox-backends: all $(VENV)/.ok
	$(VENV)/bin/python bench/graybox_backends.py $(ARGS)
# Which run makes the warm grep after nowait ordering slower: the cold run
# before it or the warm run's own backend (bench/graybox_cold_order.py,
# root; ~10 min).
.PHONY: bench-graybox-cold-order
bench-graybox-cold-order: all $(VENV)/.ok
	$(VENV)/bin/python bench/graybox_cold_order.py $(ARGS)
# What the probes leave in the page cache for the next scan: the small
# holes nowait misses left before gbp settled them (bench/graybox_holes.py,
# root, ~1 min).
.PHONY: bench-graybox-holes
bench-graybox-holes: all $(VENV)/.ok
	$(VENV)/bin/python bench/graybox_holes.py $(ARGS)
# graybox-icl Fig 7 (issue #11 §3): MAC against the truth, and four
# competing sort-like jobs with fixed pass sizes against gb_alloc, in a
# memory cgroup v1 with a swap file (bench/graybox_mac.py, root; torn down;
# ~10 min, ARGS=--quick ~3 min).
$(BUILD)/bench/mac_sort: bench/mac_sort.c $(BUILD)/libgraybox.so include/discnice/gb_alloc.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -o $@ $< \
	      -L$(BUILD) -lgraybox -Wl,-rpath,$(abspath $(BUILD))
.PHONY: bench-graybox-mac
bench-graybox-mac: all $(BUILD)/bench/mac_sort
	$(PYTHON) bench/graybox_mac.py $(ARGS)

# The scavenger experiment (issue #12 item 6): namespaces + a 10 Mbit/s tbf
# bottleneck with a deep queue; needs root (skips with a reason otherwise).
.PHONY: bench-net-scavenger
bench-net-scavenger: all
	python3 bench/net_scavenger.py --rounds 2 --out bench/results/2026-11-23-vm-net-scavenger.md

# ---- Slurm: the SPANK plugin (issue #13, contrib/slurm/) ----------------------
# build/slurm/discnice.so (loaded by srun, sbatch, salloc and slurmstepd from
# plugstack.conf) and build/slurm/discnice-slurm-task (what a wrapped task
# execs: `discnice run OPTIONS -- PROGRAM`).  Built only where Slurm's
# spank.h is installed (Debian: libslurm-dev); `make test` builds it, and
# tests/integration/test_slurm.py runs it on a private one-node cluster.
# The plugin links the tool's option parser (tool_options.c) so that srun
# refuses a bad value with discnice run's own message; no -z defs: the
# spank_* and slurm_* names come from the Slurm program that loads it.
SLURM_INCLUDE   ?= /usr/include
SLURM_HAVE      := $(wildcard $(SLURM_INCLUDE)/slurm/spank.h)
SLURM_PLUGIN_OBJ := $(call obj,contrib/slurm/discnice_spank.c contrib/slurm/slurm_settings.c \
		    src/tool/tool_options.c src/tool/tool_msg.c src/tool/tool_json.c src/common/rate.c)
.PHONY: slurm install-slurm
ifneq ($(SLURM_HAVE),)
slurm: $(BUILD)/slurm/discnice.so $(BUILD)/slurm/discnice-slurm-task \
       $(BUILD)/slurm/test/discnice.so
else
slurm:
	@echo "slurm: skipped ($(SLURM_INCLUDE)/slurm/spank.h not found: install libslurm-dev)"
endif
# Slurm finds slurm_spank_* and plugin_* by dlsym(): this file alone is
# built with default visibility; the tool's objects stay hidden.
$(BUILD)/obj/contrib/slurm/discnice_spank.o: override CFLAGS += -fvisibility=default
# Without -z defs a name none of SLURM_PLUGIN_OBJ defines links quietly
# and fails in srun at run time ("symbol lookup error"): every undefined
# name must be Slurm's or a versioned one of a system library.
SLURM_UNDEFINED_CHECK = bad=$$(nm -D --undefined-only $@ | \
	awk '$$2 !~ /@/ && $$2 !~ /^(spank_|slurm_|_ITM_|__gmon_start__)/ {print $$2}'); \
	if [ -n "$$bad" ]; then echo "$@: undefined: $$bad (add its object to SLURM_PLUGIN_OBJ)" >&2; \
	rm -f $@; exit 1; fi
$(BUILD)/slurm/discnice.so: $(SLURM_PLUGIN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -o $@ $(SLURM_PLUGIN_OBJ) -ldl
	@$(SLURM_UNDEFINED_CHECK)
# The same plugin claiming Slurm 21.08: the loader must refuse it (test_slurm.py).
$(BUILD)/slurm/test/discnice.so: contrib/slurm/discnice_spank.c $(filter-out %/discnice_spank.o,$(SLURM_PLUGIN_OBJ))
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -fvisibility=default -DDISCNICE_SLURM_TEST_VERSION=0x150800 -shared -o $@ $< \
	      $(filter-out %/discnice_spank.o,$(SLURM_PLUGIN_OBJ)) -ldl
	@$(SLURM_UNDEFINED_CHECK)
$(BUILD)/slurm/discnice-slurm-task: contrib/slurm/discnice_slurm_task.c contrib/slurm/slurm_env.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $<
$(BUILD)/san/contrib/slurm/%.o: contrib/slurm/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN_FLAGS) -MMD -MP -c -o $@ $<
$(BUILD)/tests/test_slurm_settings: tests/unit/test_slurm_settings.c $(BUILD)/san/contrib/slurm/slurm_settings.o $(SAN_CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) $(SAN_FLAGS) -o $@ $< $(BUILD)/san/contrib/slurm/slurm_settings.o \
	      $(SAN_CORE_OBJ) $(LDLIBS) -lm
integration: slurm
install-slurm: slurm
	install -d $(DESTDIR)$(PREFIX)/lib/discnice/slurm
	install -m 755 $(BUILD)/slurm/discnice.so $(DESTDIR)$(PREFIX)/lib/discnice/slurm/discnice.so
	install -m 755 $(BUILD)/slurm/discnice-slurm-task $(DESTDIR)$(PREFIX)/lib/discnice/slurm/discnice-slurm-task
	@echo "Add to plugstack.conf (e.g. /etc/slurm/plugstack.conf) on every node and submit host:"
	@echo "  optional $(PREFIX)/lib/discnice/slurm/discnice.so"

# Network cap accuracy by the receiver's count (issue #12 Targets, README
# network section): 13 caps, base-1000 and base-1024, TCP/IPv4, IPv6, UDP.
.PHONY: bench-net-accuracy
bench-net-accuracy: all
	python3 bench/net_accuracy.py $(ARGS)

# A Slurm node with and without the plugin (issue #13): a foreground read's
# slowdown beside a heavy scavenger job, on an emulated 50 MB/s disk.
# Root: a private one-node cluster and a throttled loop filesystem.
.PHONY: bench-slurm
bench-slurm: all slurm
	python3 bench/slurm_contention.py --out bench/results/2026-11-23-vm-slurm.md $(ARGS)

# The rate-windows paper's window against the sliding one (issue #12
# item 3): cold cat and a TCP send at four caps, alternating, medians.
.PHONY: bench-window-policy
bench-window-policy: all
	python3 bench/window_policy.py --out bench/results/2026-11-23-vm-window-policy.md $(ARGS)

# Network caps beside trickle (issue #12): rate accuracy, overhead at an
# infinite cap, and a table of what works (UDP, IPv6, epoll, threads, forks,
# git clone, scp to a private sshd, nginx); loopback; bench/net_trickle.py.
# Needs trickle, nginx-light, curl, wget, git, openssh-server/client (root
# for the private sshd).  ARGS=--quick for a ~5 min run, ~25 min without.
$(BUILD)/bench/net_bulk: bench/net_bulk.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $<

.PHONY: bench-net-trickle
bench-net-trickle: all $(BUILD)/bench/net_bulk
	$(PYTHON) bench/net_trickle.py $(ARGS)

# Rate-windows Fig 10 analogue (issue #12): three nginx servers under
# discnice at 1.5, 3 and 6 MB/s (and under trickle), driven by wrk, 1.7 MB
# and 71 KB files; bench/net_fig10.py, ARGS=--quick for ~2 min; ARGS=--link
# puts servers and clients in two namespaces over a 100 Mbit/s tbf link
# (the paper's ~11 MB/s network; root; dnbench-host/dnbench-net, deleted).
.PHONY: bench-net-fig10
bench-net-fig10: all
	$(PYTHON) bench/net_fig10.py $(ARGS)

# Rate-windows Fig 9 analogue (issue #12): a guest's 90 MB checkpoint upload
# beside the host's nginx under load, over a 100 Mbit/s tbf link between two
# namespaces (dnbench-host, dnbench-net; root; always deleted);
# bench/net_fig9.py, ARGS=--quick for ~90 s.
.PHONY: bench-net-fig9
bench-net-fig9: all $(BUILD)/bench/net_bulk
	$(PYTHON) bench/net_fig9.py $(ARGS)

# benice and run --policy manners keep their targets in the library's state
# files (src/tool/tool_targets.c): the tool links the library's file code too
# (paths, atomic save; I/O, so not among the pure src/manners/*.c).  benice
# takes turns in the library's per-user table (multiplex.c, with its one
# diagnostics function, warn.c).
TOOL_STATE_OBJ := $(call obj,src/manners/library/state_file.c src/manners/library/multiplex.c \
			      src/manners/library/warn.c)
TOOL_OBJ += $(TOOL_STATE_OBJ)
$(BUILD)/discnice: $(TOOL_STATE_OBJ)

# What the agent cannot see (issue #12 item 5): static C and Go senders, a
# static receiver and a dynamic sender under --net-rate, held by the
# supervisor's sock_diag feedback; judged by the other end (bench/net_unseen.py;
# the link rows need root: namespaces and tbf).
bench-net-unseen: all programs
	$(PYTHON) bench/net_unseen.py --out bench/results/2026-11-23-vm-net-unseen.md $(ARGS)

# The network interposer's cost at --net-rate inf by CPU time (issue #12):
# 4 GiB of 64 KiB loopback sends, plain and under discnice, alternating;
# bench/net_overhead_cpu.py, ARGS='--rounds N'.
.PHONY: bench-net-overhead-cpu
bench-net-overhead-cpu: all $(BUILD)/bench/net_bulk
	$(PYTHON) bench/net_overhead_cpu.py $(ARGS)
