build-clang/obj/src/common/rate.o: src/common/rate.c src/common/rate.h

src/common/rate.h:
