build-clang/obj/src/agent/open_file.o: src/agent/open_file.c \
  src/agent/agent.h include/discnice/segment.h src/agent/open_file.h \
  src/graybox/cache_detector.h src/graybox/readahead.h src/agent/spin.h \
  src/common/clock.h src/graybox/device.h

src/agent/agent.h:

include/discnice/segment.h:

src/agent/open_file.h:

src/graybox/cache_detector.h:

src/graybox/readahead.h:

src/agent/spin.h:

src/common/clock.h:

src/graybox/device.h:
