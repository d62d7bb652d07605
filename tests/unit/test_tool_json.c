/* Description: JSON strings for any bytes (tool_json.h): valid UTF-8 as is, JSON's escapes, and each byte outside UTF-8 - overlong forms, surrogates, beyond U+10FFFF, stray or truncated sequences - as \udcXX (Python's surrogateescape). */
#include <string.h>

#include "unit.h"
#include "tool/tool_json.h"

static void check_quote(const char *in, size_t len, const char *want)
{
	char out[256];
	size_t n = json_quote(out, sizeof out, in, len);
	if (n != strlen(want) || strcmp(out, want) != 0) {
		fprintf(stderr, "json_quote: got %s (%zu), want %s\n", out, n, want);
		exit(1);
	}
}

#define Q(in, want) check_quote(in, sizeof in - 1, want)

int main(void)
{
	/* ASCII and JSON's own escapes. */
	Q("plain name.txt", "\"plain name.txt\"");
	Q("", "\"\"");
	Q("a\"b\\c", "\"a\\\"b\\\\c\"");
	Q("tab\there\nnl\x1f\x7f", "\"tab\\u0009here\\u000anl\\u001f\x7f\"");
	/* Valid UTF-8 of every length, the edges of each range included. */
	Q("\xc2\x80 \xdf\xbf", "\"\xc2\x80 \xdf\xbf\"");
	Q("caf\xc3\xa9", "\"caf\xc3\xa9\"");
	Q("\xe0\xa0\x80 \xed\x9f\xbf \xee\x80\x80 \xef\xbf\xbf",
	  "\"\xe0\xa0\x80 \xed\x9f\xbf \xee\x80\x80 \xef\xbf\xbf\"");
	Q("\xf0\x90\x80\x80 \xf4\x8f\xbf\xbf", "\"\xf0\x90\x80\x80 \xf4\x8f\xbf\xbf\"");
	/* Not UTF-8: each byte of it escaped alone, what follows decoded anew. */
	Q("\xff", "\"\\udcff\"");
	Q("a\x80z", "\"a\\udc80z\"");                              /* stray continuation */
	Q("\xc0\xaf", "\"\\udcc0\\udcaf\"");                       /* overlong '/' */
	Q("\xc1\xbf", "\"\\udcc1\\udcbf\"");
	Q("\xe0\x80\xaf", "\"\\udce0\\udc80\\udcaf\"");            /* overlong, 3 bytes */
	Q("\xf0\x8f\xbf\xbf", "\"\\udcf0\\udc8f\\udcbf\\udcbf\""); /* overlong, 4 bytes */
	Q("\xed\xa0\x80", "\"\\udced\\udca0\\udc80\"");            /* U+D800 */
	Q("\xed\xbf\xbf", "\"\\udced\\udcbf\\udcbf\"");            /* U+DFFF */
	Q("\xf4\x90\x80\x80", "\"\\udcf4\\udc90\\udc80\\udc80\""); /* U+110000 */
	Q("\xf5\x80\x80\x80", "\"\\udcf5\\udc80\\udc80\\udc80\"");
	Q("\xc3", "\"\\udcc3\"");                                  /* truncated at the end */
	Q("\xe2\x82", "\"\\udce2\\udc82\"");
	Q("\xe2\x82z", "\"\\udce2\\udc82z\"");                     /* truncated mid-string */
	Q("\xc3\xc3\xa9", "\"\\udcc3\xc3\xa9\"");                  /* then a valid one */
	/* Lengths alone. */
	CHECK(json_utf8_length((const unsigned char *)"\xf0\x9f\x98\x80", 4) == 4);
	CHECK(json_utf8_length((const unsigned char *)"\xf0\x9f\x98\x80", 3) == 0);
	CHECK(json_utf8_length((const unsigned char *)"\xe2\x82\xac", 3) == 3);
	CHECK(json_utf8_length((const unsigned char *)"A", 1) == 1);
	/* Too small a buffer: the length needed, and an empty string. */
	char small[4];
	CHECK(json_quote(small, sizeof small, "\xff", 1) == 8 && small[0] == '\0');
	CHECK(json_quote(NULL, 0, "ab", 2) == 4);
	return 0;
}
