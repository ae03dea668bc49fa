/* What a reader of the node's JSON answers, and the hex digits it reads: shared by
 * _native_roots.c, _native_rows.c and _native_copy.c, each of which includes it once into its
 * one unit. */

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

/* The byte two characters stand for as hex digits, -1 where either is not one, indexed by the
 * two as a 16-bit load: one lookup a byte, where a mainnet block's transactions' inputs and logs'
 * data are a megabyte of hex. Filled by init_hex_pairs, after init_nibbles. */
static int16_t HEX_PAIR[1 << 16];

static inline void init_hex_pairs(void)
{
    for (int first = 0; first < 256; first++)
        for (int second = 0; second < 256; second++) {
            unsigned char text[2] = {(unsigned char)first, (unsigned char)second};
            uint16_t at;
            memcpy(&at, text, 2);
            HEX_PAIR[at] = (NIBBLE[first] | NIBBLE[second]) < 0 ? -1 : (int16_t)(NIBBLE[first] << 4 | NIBBLE[second]);
        }
}

/* `n` hex digits (n even) into bytes; 0 if one is not a hex digit (what was written is then
 * meaningless). */
static inline int unhex(uint8_t *out, const char *digits, size_t n)
{
    int16_t bad = 0;
    for (size_t i = 0; i < n; i += 2) {
        uint16_t at;
        memcpy(&at, digits + i, 2);
        int16_t byte = HEX_PAIR[at];
        bad |= byte;  /* negative once any pair was not hex: checked once at the end */
        *out++ = (uint8_t)byte;
    }
    return bad >= 0;
}

static inline int has_hex_prefix(const char *s, Py_ssize_t n)
{
    return n >= 2 && s[0] == '0' && s[1] == 'x';
}

#endif
