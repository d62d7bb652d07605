build-clang/obj/src/tool/tool_options.o: src/tool/tool_options.c \
  src/common/clock.h src/common/rate.h src/tool/tool_msg.h \
  src/tool/tool_options.h include/discnice/segment.h

src/common/clock.h:

src/common/rate.h:

src/tool/tool_msg.h:

src/tool/tool_options.h:

include/discnice/segment.h:
