build-clang/obj/src/common/segment.o: src/common/segment.c \
  src/common/clock.h src/common/segment.h include/discnice/segment.h

src/common/clock.h:

src/common/segment.h:

include/discnice/segment.h:
