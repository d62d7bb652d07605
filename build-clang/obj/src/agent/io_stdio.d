build-clang/obj/src/agent/io_stdio.o: src/agent/io_stdio.c src/agent/io.h \
  src/agent/libc_real.h src/agent/open_file.h include/discnice/segment.h \
  src/graybox/cache_detector.h src/graybox/readahead.h

src/agent/io.h:

src/agent/libc_real.h:

src/agent/open_file.h:

include/discnice/segment.h:

src/graybox/cache_detector.h:

src/graybox/readahead.h:
