build-clang/obj/src/tool/tool_run.o: src/tool/tool_run.c \
  src/common/clock.h src/common/proc_io.h src/common/segment.h \
  include/discnice/segment.h src/graybox/cache_detector.h \
  src/policy/policy.h src/policy/rate_window.h src/tool/tool_exec.h \
  src/tool/tool_msg.h src/tool/tool_options.h src/tool/tool_regulate.h \
  src/tool/tool_yield.h src/tool/tool_report.h src/tool/tool_run.h

src/common/clock.h:

src/common/proc_io.h:

src/common/segment.h:

include/discnice/segment.h:

src/graybox/cache_detector.h:

src/policy/policy.h:

src/policy/rate_window.h:

src/tool/tool_exec.h:

src/tool/tool_msg.h:

src/tool/tool_options.h:

src/tool/tool_regulate.h:

src/tool/tool_yield.h:

src/tool/tool_report.h:

src/tool/tool_run.h:
