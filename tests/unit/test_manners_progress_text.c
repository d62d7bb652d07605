/* Description: benice's progress text (MS Manners §7.2, §4.4): one or several whitespace-separated non-negative finite numbers, anything else refused whole; deltas refuse a decrease. */
#include <errno.h>
#include <math.h>

#include "unit.h"
#include "manners/progress_text.h"

static void test_parse(void)
{
	double v[4];
	CHECK(manners_progress_parse("42\n", v, 4) == 1 && v[0] == 42.0);
	CHECK(manners_progress_parse("  1.5e3\t7 0\n", v, 4) == 3);
	CHECK(v[0] == 1500.0 && v[1] == 7.0 && v[2] == 0.0);
	CHECK(manners_progress_parse("1 2 3 4", v, 4) == 4);
	CHECK(manners_progress_parse("1 2 3 4 5", v, 4) == -EINVAL);
	CHECK(manners_progress_parse("", v, 4) == -EINVAL);
	CHECK(manners_progress_parse(" \n", v, 4) == -EINVAL);
	CHECK(manners_progress_parse("abc", v, 4) == -EINVAL);
	CHECK(manners_progress_parse("12 abc", v, 4) == -EINVAL);
	CHECK(manners_progress_parse("12abc", v, 4) == -EINVAL);
	CHECK(manners_progress_parse("-3", v, 4) == -EINVAL);
	CHECK(manners_progress_parse("inf", v, 4) == -EINVAL);
	CHECK(manners_progress_parse("nan", v, 4) == -EINVAL);
	CHECK(manners_progress_parse("0x10", v, 4) == -EINVAL);
	CHECK(manners_progress_parse("1e999", v, 4) == -EINVAL);
	CHECK(manners_progress_parse("1..2", v, 4) == -EINVAL);
	CHECK(manners_progress_parse(NULL, v, 4) == -EINVAL);
	CHECK(manners_progress_parse("1", v, 0) == -EINVAL);
}

static void test_delta(void)
{
	double a[2] = { 10, 20 }, b[2] = { 15, 20 }, d[2];
	CHECK(manners_progress_delta(a, b, 2, d) == 0 && d[0] == 5 && d[1] == 0);
	CHECK(manners_progress_delta(b, a, 2, d) == -ERANGE);
	double n[1] = { NAN };
	CHECK(manners_progress_delta(a, n, 1, d) == -ERANGE);
	CHECK(manners_progress_delta(a, b, 0, d) == -EINVAL);
}

int main(void)
{
	test_parse();
	test_delta();
	return 0;
}
