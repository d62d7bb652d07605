build-clang/obj/src/tool/tool_report.o: src/tool/tool_report.c \
  src/common/clock.h src/common/rate.h src/policy/rate_window.h \
  include/discnice/segment.h src/tool/tool_report.h src/common/proc_io.h \
  src/tool/tool_options.h

src/common/clock.h:

src/common/rate.h:

src/policy/rate_window.h:

include/discnice/segment.h:

src/tool/tool_report.h:

src/common/proc_io.h:

src/tool/tool_options.h:
