/* What a reader of the node's JSON answers, and the hex digits it reads: shared by
 * _native_roots.c and _native_rows.c, each of which includes it once into its one unit. */

#ifndef NATIVE_SHARED_HEX_H
#define NATIVE_SHARED_HEX_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

/* What the reading of one value answers: done, or not readable here (the Python code then
 * decides, and words any error), or a Python error (out of memory). */
#define OK 1
#define DECLINE 0
#define ERROR (-1)

#define TRY(call) do { int r_ = (call); if (r_ != OK) return r_; } while (0)

/* A hex digit's value, -1 for any other byte; filled by init_nibbles at the module's import. */
static int8_t NIBBLE[256];

static void init_nibbles(void)
{
    memset(NIBBLE, -1, sizeof NIBBLE);
    for (int i = 0; i < 10; i++)
        NIBBLE['0' + i] = (int8_t)i;
    for (int i = 0; i < 6; i++)
        NIBBLE['a' + i] = NIBBLE['A' + i] = (int8_t)(10 + i);
}

static inline int has_hex_prefix(const char *s, Py_ssize_t n)
{
    return n >= 2 && s[0] == '0' && s[1] == 'x';
}

#endif
