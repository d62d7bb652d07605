build-clang/obj/src/graybox/readahead.o: src/graybox/readahead.c \
  src/graybox/readahead.h

src/graybox/readahead.h:
