build-clang/obj/src/agent/throttle.o: src/agent/throttle.c \
  src/agent/agent.h include/discnice/segment.h src/common/clock.h \
  src/common/segment.h src/policy/policy.h

src/agent/agent.h:

include/discnice/segment.h:

src/common/clock.h:

src/common/segment.h:

src/policy/policy.h:
