/* Each kind of COPY field from a value of the node's JSON, as rows.py's helpers make it (`_q`,
 * `_b`, `_timestamp`, `_data`, `_bloom`, `_hashes`, `_json`), for the strict common form only:
 * exact str of ASCII, "0x" and hex digits. Anything else is DECLINE, and rows.py makes the line
 * (or words its error). A NULL value is a key the node left out: `\N`, as `dict.get` gives None.
 * Part of _native_rows.c. */

#ifndef NATIVE_ROWS_FIELDS_H
#define NATIVE_ROWS_FIELDS_H

#include <Python.h>
#include <stdint.h>

#include "../native_shared/hex.h"
#include "line.h"

#define CHARS(v) ((const char *)PyUnicode_DATA(v))

static int is_ascii_str(PyObject *v)
{
    return PyUnicode_CheckExact(v) && PyUnicode_IS_ASCII(v);
}

/* Many characters at a time: a transaction's input and a bloom are most of the characters a line
 * checks (BENCHMARKS.md, "Hex digits 32 at a time"). */
static int all_hex(const char *s, Py_ssize_t n)
{
    const uint64_t ones = 0x0101010101010101u, high = 0x80 * ones;
    Py_ssize_t i = 0;
#if defined(__SSE2__)
    /* Sixteen with SSE2: hex.h's hex_nibbles marks the lanes that are not a digit (the values it
     * also makes are unused here, and the compiler leaves them out). */
    __m128i bad = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16)
        hex_nibbles(_mm_loadu_si128((const __m128i *)(s + i)), &bad);
    if (_mm_movemask_epi8(bad) != 0)
        return 0;
#endif
    /* Eight in a 64-bit word: each byte's top bit says whether it is in a range, found by adding
     * to all eight at once (no byte carries into the next while all are below 0x80). */
    for (; i + 8 <= n; i += 8) {
        uint64_t x, lower;
        memcpy(&x, s + i, 8);
        lower = x | 0x20 * ones;  /* A-F as a-f */
        uint64_t digit = (x + (0x80 - '0') * ones) & ~(x + (0x7f - '9') * ones);
        uint64_t letter = (lower + (0x80 - 'a') * ones) & ~(lower + (0x7f - 'f') * ones);
        if ((x & high) || ((digit | letter) & high) != high)
            return 0;
    }
    for (; i < n; i++)
        if (NIBBLE[(uint8_t)s[i]] < 0)
            return 0;
    return 1;
}

/* "0x" and hex digits: the spelling of every hex field read here. */
static int is_hex(PyObject *v)
{
    return is_ascii_str(v) && has_hex_prefix(CHARS(v), PyUnicode_GET_LENGTH(v))
        && all_hex(CHARS(v) + 2, PyUnicode_GET_LENGTH(v) - 2);
}

/* A quantity of at most 16 digits (its value in *out), as `int(value, 16)` reads it. */
static int small_quantity(PyObject *v, uint64_t *out)
{
    if (!is_hex(v) || PyUnicode_GET_LENGTH(v) < 3 || PyUnicode_GET_LENGTH(v) > 18)
        return 0;
    uint64_t value = 0;
    for (Py_ssize_t i = 2; i < PyUnicode_GET_LENGTH(v); i++)
        value = value << 4 | (uint64_t)NIBBLE[(uint8_t)CHARS(v)[i]];
    *out = value;
    return 1;
}

static int put_null(Line *line)
{
    return ADD_LITERAL(line, "\\N");
}

/* "00" to "99": decimals are written two digits a step. */
static char PAIRS[200];

static void init_pairs(void)
{
    for (int i = 0; i < 100; i++) {
        PAIRS[2 * i] = (char)('0' + i / 10);
        PAIRS[2 * i + 1] = (char)('0' + i % 10);
    }
}

/* `value`'s decimal digits, ending just before `end`, at least `width` of them (zeros in front);
 * returns where they start. */
static char *decimal(char *end, uint64_t value, int width)
{
    char *at = end;
    for (; value >= 100; value /= 100, width -= 2)
        memcpy(at -= 2, PAIRS + 2 * (value % 100), 2);
    if (value >= 10) {
        memcpy(at -= 2, PAIRS + 2 * value, 2);
        width -= 2;
    } else {
        *--at = (char)('0' + value);
        width--;
    }
    for (; width > 0; width--)
        *--at = '0';
    return at;
}

static int put_unsigned(Line *line, uint64_t value)
{
    char digits[20], *start = decimal(digits + 20, value, 1);
    return add_copy(line, start, (size_t)(digits + 20 - start));
}

/* 17 to 64 hex digits, the first not 0, as decimal: 32-bit limbs divided by 10^9 in turn, each
 * remainder nine digits. */
static int put_big(Line *line, const char *d, Py_ssize_t n)
{
    uint32_t limb[8] = {0};
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t k = (n - 1 - i) / 8;
        limb[k] = limb[k] << 4 | (uint32_t)NIBBLE[(uint8_t)d[i]];
    }
    char digits[81], *at = digits + 81;  /* nine chunks of nine digits: 2^256 has 78 */
    for (int limbs = (int)(n + 7) / 8; limbs > 0;) {
        uint64_t rest = 0;
        for (int k = limbs - 1; k >= 0; k--) {
            uint64_t part = rest << 32 | limb[k];
            limb[k] = (uint32_t)(part / 1000000000u);
            rest = part % 1000000000u;
        }
        while (limbs > 0 && limb[limbs - 1] == 0)
            limbs--;
        at = decimal(at, rest, limbs ? 9 : 1);
    }
    return add_copy(line, at, (size_t)(digits + 81 - at));
}

/* `_q`: "0x" and 1 to 64 hex digits, as decimal (`str(int(value, 16))`). */
static int put_quantity(Line *line, PyObject *v)
{
    if (v == NULL || v == Py_None)
        return put_null(line);
    Py_ssize_t n = is_hex(v) ? PyUnicode_GET_LENGTH(v) - 2 : 0;
    if (n < 1 || n > 64)
        return DECLINE;
    const char *d = CHARS(v) + 2;
    while (n > 1 && *d == '0')
        d++, n--;
    if (n > 16)
        return put_big(line, d, n);
    uint64_t value = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        value = value << 4 | (uint64_t)NIBBLE[(uint8_t)d[i]];
    return put_unsigned(line, value);
}

/* `_b`: bytea's hex input, "\\x" and the digits as sent (COPY text escapes the backslash). */
static int put_data(Line *line, PyObject *v)
{
    if (v == NULL || v == Py_None)
        return put_null(line);
    if (!is_hex(v))
        return DECLINE;
    TRY(ADD_LITERAL(line, "\\\\x"));
    return add(line, CHARS(v) + 2, PyUnicode_GET_LENGTH(v) - 2);
}

/* `_data` and `_bloom`: the same, required, and with an even number of digits. */
static int put_long_data(Line *line, PyObject *v)
{
    if (v == NULL || !is_hex(v) || PyUnicode_GET_LENGTH(v) % 2)
        return DECLINE;
    return put_data(line, v);
}

/* A block number, position or count the caller passed: an int from 0 to 2^63 - 1. */
static int count_of(PyObject *v, uint64_t *out)
{
    int overflow;
    if (v == NULL || !PyLong_CheckExact(v))
        return DECLINE;
    long long value = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (value == -1 && PyErr_Occurred())
        return ERROR;
    if (overflow || value < 0)
        return DECLINE;
    *out = (uint64_t)value;
    return OK;
}

/* `str(n)` of such an int. */
static int put_count(Line *line, PyObject *v)
{
    uint64_t value;
    TRY(count_of(v, &value));
    return put_unsigned(line, value);
}

/* `str(len(value))` of a list, `\N` for none. */
static int put_length(Line *line, PyObject *v)
{
    if (v == NULL || v == Py_None)
        return put_null(line);
    return PyList_CheckExact(v) ? put_unsigned(line, (uint64_t)PyList_GET_SIZE(v)) : DECLINE;
}

/* The last second of year 9999: later ones `time.strftime` writes with more digits. */
#define LAST_TIMESTAMP 253402300799ull

static void put_two(char *at, unsigned value)
{
    at[0] = (char)('0' + value / 10);
    at[1] = (char)('0' + value % 10);
}

/* `_timestamp`: "%Y-%m-%d %H:%M:%S+00" of `time.gmtime`; the date from the days since 1970 by
 * Howard Hinnant's civil_from_days. */
static int put_timestamp(Line *line, PyObject *v)
{
    uint64_t t;
    char *at;
    if (v == NULL || !small_quantity(v, &t) || t > LAST_TIMESTAMP || (at = room(line, 22)) == NULL)
        return DECLINE;
    uint64_t z = t / 86400 + 719468, seconds = t % 86400;
    uint64_t era = z / 146097, doe = z % 146097;
    uint64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    uint64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    unsigned day = (unsigned)(doy - (153 * mp + 2) / 5 + 1), month = (unsigned)(mp < 10 ? mp + 3 : mp - 9);
    unsigned year = (unsigned)(yoe + era * 400 + (month <= 2));
    put_two(at, year / 100);
    put_two(at + 2, year % 100);
    memcpy(at + 4, "-00-00 00:00:00+00", 18);
    put_two(at + 5, month);
    put_two(at + 8, day);
    put_two(at + 11, (unsigned)(seconds / 3600));
    put_two(at + 14, (unsigned)(seconds / 60 % 60));
    put_two(at + 17, (unsigned)(seconds % 60));
    return add(line, at, 22);
}

/* `_hashes`: a bytea[] literal, {"\\\\x..","\\\\x.."} in COPY text; each item held, as its
 * digits are pieces of the line. */
static int put_hashes(Line *line, PyObject *v)
{
    if (v == NULL || v == Py_None)
        return put_null(line);
    if (!PyList_CheckExact(v))
        return DECLINE;
    if (PyList_GET_SIZE(v) == 0)
        return ADD_LITERAL(line, "{}");
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
        PyObject *item = PyList_GET_ITEM(v, i);
        if (!is_hex(item))
            return DECLINE;
        TRY(hold(line, item));
        TRY(i ? ADD_LITERAL(line, "\",\"\\\\\\\\x") : ADD_LITERAL(line, "{\"\\\\\\\\x"));
        TRY(add(line, CHARS(item) + 2, PyUnicode_GET_LENGTH(item) - 2));
    }
    return ADD_LITERAL(line, "\"}");
}

/* A log's topics, four columns: each as `_b`, then `\N` for those it lacks; more than four is an
 * error of Python's. */
static int put_topics(Line *line, PyObject *v)
{
    if (v == NULL || !PyList_CheckExact(v) || PyList_GET_SIZE(v) > 4)
        return DECLINE;
    Py_ssize_t count = PyList_GET_SIZE(v);
    for (Py_ssize_t i = 0; i < 4; i++) {
        if (i)
            TRY(ADD_LITERAL(line, "\t"));
        if (i >= count) {
            TRY(put_null(line));
            continue;
        }
        TRY(hold(line, PyList_GET_ITEM(v, i)));
        TRY(put_data(line, PyList_GET_ITEM(v, i)));
    }
    return OK;
}

/* A field the caller made (a log's transaction hash, as `_b` made it for the transaction's
 * line): taken when it is `\N` or "\\x" and hex digits. */
static int put_made(Line *line, PyObject *v)
{
    if (v == NULL || !is_ascii_str(v))
        return DECLINE;
    const char *s = CHARS(v);
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    int null = n == 2 && s[0] == '\\' && s[1] == 'N';
    if (!null && !(n >= 3 && s[0] == '\\' && s[1] == '\\' && s[2] == 'x' && all_hex(s + 3, n - 3)))
        return DECLINE;
    return add(line, s, n);
}

/* `_json` of an access or authorization list: `\N`, "[]", or for a list with items rows.py's
 * own `_json` called (its jsonb text is rare enough and long to remake). */
static int put_json(Line *line, PyObject *v, PyObject *json)
{
    if (v == NULL || v == Py_None)
        return put_null(line);
    if (!PyList_CheckExact(v))
        return DECLINE;
    if (PyList_GET_SIZE(v) == 0)
        return ADD_LITERAL(line, "[]");
    if (json == NULL)
        return DECLINE;
    Py_INCREF(json);  /* held across the call: its code could configure the module anew */
    PyObject *text = PyObject_CallOneArg(json, v);
    Py_DECREF(json);
    if (text == NULL)
        return fault();
    int r = is_ascii_str(text) ? hold(line, text) : DECLINE;
    if (r == OK)
        r = add(line, CHARS(text), PyUnicode_GET_LENGTH(text));
    Py_DECREF(text);
    return r;
}

#endif
