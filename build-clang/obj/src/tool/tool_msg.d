build-clang/obj/src/tool/tool_msg.o: src/tool/tool_msg.c \
  src/tool/tool_msg.h

src/tool/tool_msg.h:
