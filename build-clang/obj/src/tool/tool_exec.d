build-clang/obj/src/tool/tool_exec.o: src/tool/tool_exec.c \
  src/tool/tool_exec.h src/tool/tool_msg.h

src/tool/tool_exec.h:

src/tool/tool_msg.h:
