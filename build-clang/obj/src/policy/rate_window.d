build-clang/obj/src/policy/rate_window.o: src/policy/rate_window.c \
  src/policy/policy.h include/discnice/segment.h \
  src/policy/rate_window.h

src/policy/policy.h:

include/discnice/segment.h:

src/policy/rate_window.h:
