build-clang/obj/src/tool/tool_ls.o: src/tool/tool_ls.c src/common/rate.h \
  src/tool/tool_class.h include/discnice/segment.h src/tool/tool_msg.h

src/common/rate.h:

src/tool/tool_class.h:

include/discnice/segment.h:

src/tool/tool_msg.h:
