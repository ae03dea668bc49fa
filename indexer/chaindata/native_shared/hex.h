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

/* `n` hex digits (n even) into bytes by the pair table; 0 if one is not a hex digit (what was
 * written is then meaningless). */
static inline int unhex_pairs(uint8_t *out, const char *digits, size_t n)
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

#if defined(__SSE2__)  /* every x86-64 processor */
#include <emmintrin.h>

/* 16 characters' hex values, and in `*bad` the lanes of those that are not a hex digit: a digit
 * is x - '0' at most 9, a letter (x | 0x20) - 'a' at most 5, both compared unsigned. */
static inline __m128i hex_nibbles(__m128i x, __m128i *bad)
{
    __m128i digit = _mm_sub_epi8(x, _mm_set1_epi8('0'));
    __m128i is_digit = _mm_cmpeq_epi8(_mm_min_epu8(digit, _mm_set1_epi8(9)), digit);
    __m128i letter = _mm_sub_epi8(_mm_or_si128(x, _mm_set1_epi8(0x20)), _mm_set1_epi8('a'));
    __m128i is_letter = _mm_cmpeq_epi8(_mm_min_epu8(letter, _mm_set1_epi8(5)), letter);
    *bad = _mm_or_si128(*bad, _mm_andnot_si128(_mm_or_si128(is_digit, is_letter), _mm_set1_epi8(-1)));
    return _mm_or_si128(_mm_and_si128(is_digit, digit),
                        _mm_and_si128(is_letter, _mm_add_epi8(letter, _mm_set1_epi8(10))));
}

/* Each 16-bit lane's two values (first digit low, as loaded) as one byte, in the lane's low half. */
static inline __m128i hex_pairs(__m128i values)
{
    return _mm_or_si128(_mm_and_si128(_mm_slli_epi16(values, 4), _mm_set1_epi16(0x00f0)),
                        _mm_srli_epi16(values, 8));
}
#endif

/* `n` hex digits (n even) into bytes; 0 if one is not a hex digit (what was written is then
 * meaningless). With SSE2, 32 digits at a time (0.31x the pair table's CPU on long values:
 * BENCHMARKS.md, "Hex digits 32 at a time"), the rest by the table. */
static inline int unhex(uint8_t *out, const char *digits, size_t n)
{
    size_t i = 0;
#if defined(__SSE2__)
    __m128i bad = _mm_setzero_si128();
    for (; i + 32 <= n; i += 32, out += 16) {
        __m128i first = hex_nibbles(_mm_loadu_si128((const __m128i *)(digits + i)), &bad);
        __m128i second = hex_nibbles(_mm_loadu_si128((const __m128i *)(digits + i + 16)), &bad);
        _mm_storeu_si128((__m128i *)out, _mm_packus_epi16(hex_pairs(first), hex_pairs(second)));
    }
    if (_mm_movemask_epi8(bad) != 0)
        return 0;
#endif
    return unhex_pairs(out, digits + i, n - i);
}

static inline int has_hex_prefix(const char *s, Py_ssize_t n)
{
    return n >= 2 && s[0] == '0' && s[1] == 'x';
}

#endif
