build-clang/obj/src/tool/tool_top.o: src/tool/tool_top.c \
  src/common/clock.h src/common/rate.h src/tool/tool_class.h \
  include/discnice/segment.h src/tool/tool_msg.h

src/common/clock.h:

src/common/rate.h:

src/tool/tool_class.h:

include/discnice/segment.h:

src/tool/tool_msg.h:
