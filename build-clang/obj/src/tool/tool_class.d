build-clang/obj/src/tool/tool_class.o: src/tool/tool_class.c \
  src/common/clock.h src/common/rate.h src/common/segment.h \
  include/discnice/segment.h src/policy/rate_window.h \
  src/tool/tool_class.h src/tool/tool_msg.h

src/common/clock.h:

src/common/rate.h:

src/common/segment.h:

include/discnice/segment.h:

src/policy/rate_window.h:

src/tool/tool_class.h:

src/tool/tool_msg.h:
