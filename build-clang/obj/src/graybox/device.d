build-clang/obj/src/graybox/device.o: src/graybox/device.c \
  src/graybox/device.h

src/graybox/device.h:
