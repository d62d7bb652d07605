build-clang/obj/src/tool/discnice.o: src/tool/discnice.c \
  src/tool/tool_class.h include/discnice/segment.h src/tool/tool_msg.h \
  src/tool/tool_options.h src/tool/tool_run.h

src/tool/tool_class.h:

include/discnice/segment.h:

src/tool/tool_msg.h:

src/tool/tool_options.h:

src/tool/tool_run.h:
