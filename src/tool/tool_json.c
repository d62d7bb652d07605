/*
 * tool_json.c - JSON strings for any bytes (see tool_json.h).
 */
#include "tool/tool_json.h"

#include <stdbool.h>
#include <string.h>

/* The longest text one input byte becomes: "\udcff". */
#define PIECE_MAX 6

size_t json_utf8_length(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len;
	unsigned char low = 0x80, high = 0xbf; /* the second byte's range */
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			low = 0xa0; /* below: overlong */
		else if (c == 0xed)
			high = 0x9f; /* above: U+D800..U+DFFF, surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			low = 0x90; /* below: overlong */
		else if (c == 0xf4)
			high = 0x8f; /* above: beyond U+10FFFF */
	} else {
		return 0; /* a continuation byte, 0xc0/0xc1 (overlong), 0xf5.. */
	}
	if (n < len || s[1] < low || s[1] > high)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

/* The JSON text for the next piece of s (n > 0 bytes left) into piece;
 * returns its length, and *used the bytes of s it stands for. */
static size_t next_piece(const unsigned char *s, size_t n, char piece[PIECE_MAX], size_t *used)
{
	static const char hex[] = "0123456789abcdef";
	size_t len = json_utf8_length(s, n);
	*used = len ? len : 1;
	if (len > 1) {
		memcpy(piece, s, len);
		return len;
	}
	unsigned char c = s[0];
	if (len == 1 && c >= 0x20 && c != '"' && c != '\\') {
		piece[0] = (char)c;
		return 1;
	}
	if (len == 1 && (c == '"' || c == '\\')) {
		piece[0] = '\\';
		piece[1] = (char)c;
		return 2;
	}
	/* A control character (\u00XX), or a byte outside UTF-8 (\udcXX). */
	memcpy(piece, len ? "\\u00" : "\\udc", 4);
	piece[4] = hex[c >> 4];
	piece[5] = hex[c & 15];
	return 6;
}

size_t json_quote(char *out, size_t size, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t need = 0;
	char piece[PIECE_MAX];
	bool fits = true;
#define PUT(text, n)                                               \
	do {                                                       \
		if (fits && need + (n) < size)                     \
			memcpy(out + need, (text), (n));           \
		else                                               \
			fits = false;                              \
		need += (n);                                       \
	} while (0)
	PUT("\"", 1);
	for (size_t at = 0; at < len;) {
		size_t used, n = next_piece(p + at, len - at, piece, &used);
		PUT(piece, n);
		at += used;
	}
	PUT("\"", 1);
#undef PUT
	if (size > 0)
		out[fits ? need : 0] = '\0';
	return need;
}

void json_print_string(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t len = strlen(s);
	char piece[PIECE_MAX];
	fputc('"', f);
	for (size_t at = 0; at < len;) {
		size_t used, n = next_piece(p + at, len - at, piece, &used);
		fwrite(piece, 1, n, f);
		at += used;
	}
	fputc('"', f);
}
