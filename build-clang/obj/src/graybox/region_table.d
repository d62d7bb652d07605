build-clang/obj/src/graybox/region_table.o: src/graybox/region_table.c \
  src/graybox/region_table.h

src/graybox/region_table.h:
