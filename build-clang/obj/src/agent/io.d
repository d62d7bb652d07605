build-clang/obj/src/agent/io.o: src/agent/io.c src/agent/agent.h \
  include/discnice/segment.h src/agent/io.h src/agent/libc_real.h \
  src/agent/open_file.h src/graybox/cache_detector.h \
  src/graybox/readahead.h src/agent/spin.h src/common/clock.h \
  src/graybox/region_table.h

src/agent/agent.h:

include/discnice/segment.h:

src/agent/io.h:

src/agent/libc_real.h:

src/agent/open_file.h:

src/graybox/cache_detector.h:

src/graybox/readahead.h:

src/agent/spin.h:

src/common/clock.h:

src/graybox/region_table.h:
