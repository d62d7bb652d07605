build-clang/obj/src/graybox/cache_detector.o: \
  src/graybox/cache_detector.c src/graybox/cache_detector.h \
  include/discnice/segment.h src/common/clock.h src/common/proc_io.h

src/graybox/cache_detector.h:

include/discnice/segment.h:

src/common/clock.h:

src/common/proc_io.h:
