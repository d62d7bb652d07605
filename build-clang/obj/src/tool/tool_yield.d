build-clang/obj/src/tool/tool_yield.o: src/tool/tool_yield.c \
  src/common/proc_io.h src/common/segment.h include/discnice/segment.h \
  src/tool/tool_yield.h

src/common/proc_io.h:

src/common/segment.h:

include/discnice/segment.h:

src/tool/tool_yield.h:
