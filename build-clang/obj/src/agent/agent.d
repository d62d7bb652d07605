build-clang/obj/src/agent/agent.o: src/agent/agent.c src/agent/agent.h \
  include/discnice/segment.h src/agent/io.h src/agent/libc_real.h \
  src/agent/open_file.h src/graybox/cache_detector.h \
  src/graybox/readahead.h src/common/clock.h src/common/segment.h

src/agent/agent.h:

include/discnice/segment.h:

src/agent/io.h:

src/agent/libc_real.h:

src/agent/open_file.h:

src/graybox/cache_detector.h:

src/graybox/readahead.h:

src/common/clock.h:

src/common/segment.h:
