build-clang/obj/src/common/proc_io.o: src/common/proc_io.c \
  src/common/proc_io.h

src/common/proc_io.h:
