/* rows.py's text COPY lines turned into PostgreSQL's binary COPY form, so that the database takes
 * in bytes and integers instead of parsing a megabyte of hex digits and decimal numbers a
 * mainnet block (BENCHMARKS.md, "Binary COPY, taken"). Each field is read exactly as
 * PostgreSQL's text input would read it, for the forms rows.py writes only (decimal digits, a
 * bytea's `\\x` and hex digits, a bytea[] of such items, jsonb text with COPY's four escapes, a
 * timestamp as `YYYY-MM-DD HH:MM:SS+00`, `\N`); for any other field, or a value the column
 * could not hold, the whole table's lines are declined (None) and go to the database as text,
 * which stores them or refuses them in its own words, as before. So a table holds the same
 * values either way (tests/test_binary_copy.py). And the token transfers, decoded from the logs'
 * records into a binary COPY of their rows (native_copy/transfers.h). Built by the install
 * beside the other C parts (scripts/build_native.py); without it every COPY is text and the
 * token transfers are decoded in SQL. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "native_shared/hex.h"

/* The column kinds of `encode`'s `kinds`, one byte a column: store.py's `_KIND`. */
#define BIGINT '8'
#define INTEGER '4'
#define SMALLINT '2'
#define NUMERIC_78 'N'
#define NUMERIC_20 'n'
#define BYTEA 'b'
#define BYTEA_ARRAY 'a'
#define JSONB 'j'
#define TIMESTAMPTZ 't'

#define BYTEA_OID 17

static const char SIGNATURE[11] = "PGCOPY\n\377\r\n\0";

typedef struct {
    char *at;  /* where the next byte goes; the buffer was sized for the worst case */
} Out;

static void put16(Out *out, int v)
{
    uint16_t u = (uint16_t)v;
    out->at[0] = (char)(u >> 8);
    out->at[1] = (char)u;
    out->at += 2;
}

static void put32(Out *out, int64_t v)
{
    uint32_t u = (uint32_t)v;
    for (int i = 3; i >= 0; i--)
        *out->at++ = (char)(u >> (8 * i));
}

static void put64(Out *out, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--)
        *out->at++ = (char)(u >> (8 * i));
}

/* The binary COPY's header: its signature, no flags, no header extension. */
#define HEADER_SIZE (sizeof SIGNATURE + 8)

static void put_header(Out *out)
{
    memcpy(out->at, SIGNATURE, sizeof SIGNATURE);
    out->at += sizeof SIGNATURE;
    put32(out, 0), put32(out, 0);
}

/* A 4-byte length or count known only once what follows is written: `hole` leaves its place,
 * `fill` writes it there. */
static char *hole(Out *out)
{
    char *at = out->at;
    out->at += 4;
    return at;
}

static void fill(char *at, int64_t value)
{
    Out back = {at};
    put32(&back, value);
}

/* Decimal digits only, as rows.py writes every integer, with at most `most` of them after any
 * leading zeros (PostgreSQL's limit for the column): the value in `*value`. */
static int read_integer(const char *s, Py_ssize_t n, int64_t most, int64_t *value)
{
    if (n == 0 || n > 19)
        return DECLINE;
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return DECLINE;
        v = v * 10 + (uint64_t)(s[i] - '0');  /* 19 digits stay under 2^64 */
    }
    if (v > (uint64_t)most)
        return DECLINE;
    *value = (int64_t)v;
    return OK;
}

/* numeric(precision, 0) from decimal digits: base-10,000 digits, the first holding what is left
 * over at the left, with the weight of the first; no sign, no scale. */
static int put_numeric(Out *out, const char *s, Py_ssize_t n, int precision)
{
    if (n == 0)
        return DECLINE;
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return DECLINE;
    while (n > 1 && *s == '0')
        s++, n--;
    if (n > precision)
        return DECLINE;  /* "numeric field overflow": the text COPY says it */
    if (n == 1 && *s == '0') {
        put32(out, 8);
        put16(out, 0), put16(out, 0), put16(out, 0), put16(out, 0);
        return OK;
    }
    int groups = (int)((n + 3) / 4);
    put32(out, 8 + 2 * groups);
    put16(out, groups), put16(out, groups - 1), put16(out, 0), put16(out, 0);
    Py_ssize_t first = n - 4 * (groups - 1);  /* 1 to 4 digits */
    for (Py_ssize_t at = 0, width = first; at < n; at += width, width = 4) {
        int digit = 0;
        for (Py_ssize_t i = at; i < at + width; i++)
            digit = digit * 10 + (s[i] - '0');
        put16(out, digit);
    }
    return OK;
}

/* Pairs of hex digits into bytes; any other byte (a space bytea's input would skip) declines. */
static int put_hex(Out *out, const char *s, Py_ssize_t n)
{
    if (n % 2 || !unhex((uint8_t *)out->at, s, (size_t)n))
        return DECLINE;
    out->at += n / 2;
    return OK;
}

/* A bytea field: `\\x` (COPY's escaped backslash) and hex digits. */
static int put_bytea(Out *out, const char *s, Py_ssize_t n)
{
    if (n < 3 || s[0] != '\\' || s[1] != '\\' || s[2] != 'x')
        return DECLINE;
    char *length = hole(out);
    TRY(put_hex(out, s + 3, n - 3));
    fill(length, out->at - length - 4);
    return OK;
}

/* A bytea[] as rows._hashes writes it: {} or {"\\\\xab..","\\\\xcd.."}: a one-dimensional array
 * from 1, without NULLs. */
static int put_bytea_array(Out *out, const char *s, Py_ssize_t n)
{
    if (n < 2 || s[0] != '{' || s[n - 1] != '}')
        return DECLINE;
    char *length = hole(out);
    if (n == 2) {
        put32(out, 0), put32(out, 0), put32(out, BYTEA_OID);
    } else {
        put32(out, 1), put32(out, 0), put32(out, BYTEA_OID);
        char *count = hole(out);
        put32(out, 1);
        int64_t items = 0;
        const char *at = s + 1, *end = s + n - 1;
        for (;;) {
            if (end - at < 7 || memcmp(at, "\"\\\\\\\\x", 6) != 0)
                return DECLINE;
            const char *digits = at + 6, *close = memchr(digits, '"', (size_t)(end - digits));
            if (close == NULL)
                return DECLINE;
            char *item = hole(out);
            TRY(put_hex(out, digits, close - digits));
            fill(item, out->at - item - 4);
            items++;
            at = close + 1;
            if (at == end)
                break;
            if (*at++ != ',')
                return DECLINE;
        }
        if (items > INT32_MAX)
            return DECLINE;
        fill(count, items);
    }
    fill(length, out->at - length - 4);
    return OK;
}

/* jsonb: its version (1) and the text, COPY's escapes of rows.copy_text undone. */
static int put_jsonb(Out *out, const char *s, Py_ssize_t n)
{
    char *length = hole(out);
    *out->at++ = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\') {
            if (++i == n)
                return DECLINE;
            switch (s[i]) {
            case '\\': c = '\\'; break;
            case 't': c = '\t'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            default: return DECLINE;  /* an escape rows.py does not write */
            }
        } else if (c == '\n' || c == '\r' || c == '\0') {
            return DECLINE;  /* the text COPY would read another line, or refuse it */
        }
        *out->at++ = c;
    }
    fill(length, out->at - length - 4);
    return OK;
}

static int64_t days_from_civil(int64_t y, int m, int d)  /* days since 1970-01-01 (H. Hinnant's) */
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int two(const char *s, int *value)
{
    if (s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9')
        return DECLINE;
    *value = (s[0] - '0') * 10 + (s[1] - '0');
    return OK;
}

/* timestamptz as rows._timestamp writes it, "YYYY-MM-DD HH:MM:SS+00": microseconds since
 * 2000-01-01 00:00:00 UTC. */
static int put_timestamp(Out *out, const char *s, Py_ssize_t n)
{
    static const int MONTH_DAYS[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int century, year, month, day, hour, minute, second;
    if (n != 22 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':'
            || memcmp(s + 19, "+00", 3) != 0)
        return DECLINE;
    TRY(two(s, &century)); TRY(two(s + 2, &year)); TRY(two(s + 5, &month)); TRY(two(s + 8, &day));
    TRY(two(s + 11, &hour)); TRY(two(s + 14, &minute)); TRY(two(s + 17, &second));
    year += 100 * century;
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (year < 1 || month < 1 || month > 12 || day < 1 || day > MONTH_DAYS[month - 1]
            || (month == 2 && day == 29 && !leap) || hour > 23 || minute > 59 || second > 59)
        return DECLINE;
    int64_t seconds = (days_from_civil(year, month, day) - days_from_civil(2000, 1, 1)) * 86400
                      + hour * 3600 + minute * 60 + second;
    put32(out, 8);
    put64(out, seconds * 1000000);
    return OK;
}

static int put_field(Out *out, char kind, const char *s, Py_ssize_t n)
{
    int64_t value;
    if (n == 2 && s[0] == '\\' && s[1] == 'N') {
        put32(out, -1);
        return OK;
    }
    switch (kind) {
    case BIGINT:
        TRY(read_integer(s, n, INT64_MAX, &value));
        put32(out, 8), put64(out, value);
        return OK;
    case INTEGER:
        TRY(read_integer(s, n, INT32_MAX, &value));
        put32(out, 4), put32(out, value);
        return OK;
    case SMALLINT:
        TRY(read_integer(s, n, INT16_MAX, &value));
        put32(out, 2), put16(out, (int)value);
        return OK;
    case NUMERIC_78:
        return put_numeric(out, s, n, 78);
    case NUMERIC_20:
        return put_numeric(out, s, n, 20);
    case BYTEA:
        return put_bytea(out, s, n);
    case BYTEA_ARRAY:
        return put_bytea_array(out, s, n);
    case JSONB:
        return put_jsonb(out, s, n);
    case TIMESTAMPTZ:
        return put_timestamp(out, s, n);
    }
    return DECLINE;
}

/* One line: exactly one field a column. (A byte that would end or break a text line, a newline,
 * a carriage return or a NUL, is declined by the field that holds it.) */
static int put_line(Out *out, const char *kinds, Py_ssize_t columns, const char *s, Py_ssize_t n)
{
    put16(out, (int)columns);
    const char *end = s + n;
    for (Py_ssize_t column = 0; column < columns; column++) {
        const char *tab = memchr(s, '\t', (size_t)(end - s));
        if ((tab == NULL) != (column == columns - 1))
            return DECLINE;  /* too few or too many fields */
        const char *stop = tab ? tab : end;
        TRY(put_field(out, kinds[column], s, stop - s));
        s = stop + 1;
    }
    return OK;
}

/* The most a field's binary form can exceed its text by is 19 bytes: a bytea[] of one empty item,
 * `{"\\\\x"}`, is 28 bytes from 9 characters (its length, the array's 20 bytes of header, the
 * item's length); `{}` is 16 from 2, a one-digit numeric 14 from 1, a bigint 12 from 1. */
#define GROWTH 20

/* A line as long as this, the text COPY refuses ("out of memory": its limit is 1 GB): and a field
 * past 2^31 bytes would not fit its 4-byte length. */
#define LONGEST_LINE ((Py_ssize_t)1 << 30)

static PyObject *encode(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *lines;
    const char *kinds;
    Py_ssize_t columns;
    if (!PyArg_ParseTuple(args, "O!y#:encode", &PyList_Type, &lines, &kinds, &columns))
        return NULL;
    if (columns < 1 || columns > 1600 || strspn(kinds, "842Nnbajt") != (size_t)columns) {
        PyErr_SetString(PyExc_ValueError, "encode: between 1 and 1,600 columns, each of a kind 842Nnbajt");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(lines);
    size_t size = HEADER_SIZE + 2;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyUnicode_CheckExact(line) || !PyUnicode_IS_ASCII(line) || PyUnicode_GET_LENGTH(line) >= LONGEST_LINE)
            Py_RETURN_NONE;  /* other characters keep the text COPY's encoding rules */
        size += 2 + (size_t)columns * GROWTH + (size_t)PyUnicode_GET_LENGTH(line);
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (result == NULL)
        return NULL;
    Out out = {PyBytes_AS_STRING(result)};
    put_header(&out);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (put_line(&out, kinds, columns, (const char *)PyUnicode_DATA(line), PyUnicode_GET_LENGTH(line)) != OK) {
            Py_DECREF(result);
            Py_RETURN_NONE;
        }
    }
    put16(&out, -1);
    Py_ssize_t written = out.at - PyBytes_AS_STRING(result);
    if ((size_t)written > size)  /* GROWTH is wrong: the tests' widest forms say so here */
        Py_FatalError("_native_copy.encode wrote past its buffer");
    if (_PyBytes_Resize(&result, written) < 0)
        return NULL;
    return result;
}

#include "native_copy/transfers.h"

static PyMethodDef METHODS[] = {
    {"encode", encode, METH_VARARGS,
     "encode(lines, kinds) -> bytes | None: a table's text COPY lines (a list of str) as one binary COPY, "
     "header and trailer included, the columns' kinds one byte each; None where any line is to go as text."},
    {"transfers", transfers, METH_O,
     "transfers(records) -> (bytes, {shape: count}) | None: the token transfers of the logs' records that "
     "token_transfers.TRANSFER_LOGS selects, as one binary COPY of token_transfers.COPY_TRANSFERS' columns, and "
     "every log counted by DECODE_FIXED's shapes; None where a log is not read here."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_native_copy", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native_copy(void)
{
    init_nibbles();
    init_hex_pairs();
    return PyModule_Create(&MODULE);
}
