build-clang/obj/src/tool/tool_regulate.o: src/tool/tool_regulate.c \
  src/common/clock.h src/common/segment.h include/discnice/segment.h \
  src/policy/policy.h src/tool/tool_msg.h src/tool/tool_regulate.h \
  src/common/proc_io.h

src/common/clock.h:

src/common/segment.h:

include/discnice/segment.h:

src/policy/policy.h:

src/tool/tool_msg.h:

src/tool/tool_regulate.h:

src/common/proc_io.h:
