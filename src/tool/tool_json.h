/*
 * tool_json.h - JSON strings for any bytes.  Names on Linux (file names,
 * arguments, class names) are bytes, not text; JSON (RFC 8259) strings
 * are Unicode.  Valid UTF-8 is written as is; a byte that is not part of
 * a valid UTF-8 sequence is written as \udcXX, XX its value: Python's
 * "surrogateescape" convention (PEP 383), so json.loads() accepts it and
 * os.fsencode() gives back the exact bytes.
 */
#ifndef DISCNICE_TOOL_JSON_H
#define DISCNICE_TOOL_JSON_H

#include <stddef.h>
#include <stdio.h>

/* The length of the valid UTF-8 sequence at s (n > 0 bytes left): 1 to 4,
 * or 0 when s[0] does not begin one - overlong forms, UTF-16 surrogates
 * (U+D800..U+DFFF), code points above U+10FFFF, stray continuation bytes
 * and truncated sequences are not UTF-8 (RFC 3629 section 4). */
size_t json_utf8_length(const unsigned char *s, size_t n);

/* The JSON string for s[0 .. len), quotes included, into out (size bytes),
 * NUL-terminated - empty if it does not fit; returns the length it needs
 * without the NUL.  Pure: no I/O, no globals. */
size_t json_quote(char *out, size_t size, const char *s, size_t len);

/* The same, written to f. */
void json_print_string(FILE *f, const char *s);

#endif
