build-clang/obj/src/tool/tool_set.o: src/tool/tool_set.c \
  src/common/rate.h src/common/segment.h include/discnice/segment.h \
  src/tool/tool_class.h src/tool/tool_msg.h

src/common/rate.h:

src/common/segment.h:

include/discnice/segment.h:

src/tool/tool_class.h:

src/tool/tool_msg.h:
