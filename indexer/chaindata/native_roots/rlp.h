/* RLP into a growing byte buffer (native_shared/buffer.h), and the JSON's hex strings read into
 * RLP: the pieces every encoding is made of. A reader answers OK (written), DECLINE (not read
 * here: the Python check decides) or ERROR (a Python exception is set): native_shared/hex.h. Part
 * of _native_roots.c. */

#ifndef NATIVE_ROOTS_RLP_H
#define NATIVE_ROOTS_RLP_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../native_shared/buffer.h"
#include "../native_shared/hex.h"

/* Room for `more` bytes, or -1 with MemoryError set. */
static int reserve(Buffer *b, size_t more)
{
    if (grow(b, more) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int put(Buffer *b, const uint8_t *data, size_t n)
{
    if (n == 0)
        return 0;
    if (reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, data, n);
    b->len += n;
    return 0;
}

static int put_byte(Buffer *b, uint8_t byte)
{
    return put(b, &byte, 1);
}

/* The prefix of a string (offset 0x80) or list (0xc0) of n bytes; returns its length. */
static size_t rlp_prefix(uint8_t out[9], size_t n, uint8_t offset)
{
    if (n < 56) {
        out[0] = (uint8_t)(offset + n);
        return 1;
    }
    size_t size = 0;
    for (size_t m = n; m && size < 8; m >>= 8)
        size++;
    out[0] = (uint8_t)(offset + 55 + size);
    for (size_t i = 0; i < size; i++)
        out[size - i] = (uint8_t)(n >> (8 * i));
    return size + 1;
}

static int put_prefix(Buffer *b, size_t n, uint8_t offset)
{
    uint8_t prefix[9];
    return put(b, prefix, rlp_prefix(prefix, n, offset));
}

/* A list is written as its payload, then its prefix moved in front of it. */
static int end_list(Buffer *b, size_t start)
{
    uint8_t prefix[9];
    size_t n = rlp_prefix(prefix, b->len - start, 0xc0);
    if (reserve(b, n) < 0)
        return -1;
    memmove(b->data + start + n, b->data + start, b->len - start);
    memcpy(b->data + start, prefix, n);
    b->len += n;
    return 0;
}

/* A string value of the dict: OK with its characters, DECLINE when missing, null or not a string
 * of ASCII. `*missing` (if given) says whether it was absent or null rather than unreadable. */
static int get_str(PyObject *dict, PyObject *key, const char **s, Py_ssize_t *n, int *missing)
{
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (missing)
        *missing = 0;
    if (value == NULL || value == Py_None) {
        if (PyErr_Occurred())
            return ERROR;
        if (missing)
            *missing = 1;
        return DECLINE;
    }
    if (!PyUnicode_Check(value) || !PyUnicode_IS_ASCII(value))
        return DECLINE;
    *s = (const char *)PyUnicode_DATA(value);
    *n = PyUnicode_GET_LENGTH(value);
    return OK;
}

/* A list value of the dict, borrowed: OK, DECLINE when missing or not a list, ERROR when the
 * lookup raised. */
static int get_list(PyObject *dict, PyObject *key, PyObject **list)
{
    *list = PyDict_GetItemWithError(dict, key);
    if (*list == NULL)
        return PyErr_Occurred() ? ERROR : DECLINE;
    return PyList_Check(*list) ? OK : DECLINE;
}

/* rlp(quantity) from "0x1a2b": big-endian without leading zeros. */
static int put_quantity_str(Buffer *b, const char *s, Py_ssize_t n)
{
    if (!has_hex_prefix(s, n) || n == 2)
        return DECLINE;
    const char *d = s + 2;
    size_t digits = (size_t)n - 2;
    for (size_t i = 0; i < digits; i++)
        if (NIBBLE[(uint8_t)d[i]] < 0)
            return DECLINE;
    while (digits && *d == '0')
        d++, digits--;
    size_t size = (digits + 1) / 2;
    if (reserve(b, size + 9) < 0)
        return ERROR;
    if (size == 0)
        return put_byte(b, 0x80) < 0 ? ERROR : OK;
    uint8_t first = (uint8_t)(digits & 1 ? NIBBLE[(uint8_t)*d] : NIBBLE[(uint8_t)d[0]] << 4 | NIBBLE[(uint8_t)d[1]]);
    if (size == 1 && first < 0x80)
        return put_byte(b, first) < 0 ? ERROR : OK;
    (void)put_prefix(b, size, 0x80);  /* room reserved above */
    b->data[b->len++] = first;
    d += digits & 1 ? 1 : 2;
    unhex(b->data + b->len, d, 2 * (size - 1));
    b->len += size - 1;
    return OK;
}

/* rlp(bytes) from "0xa9059cbb...". */
static int put_data_str(Buffer *b, const char *s, Py_ssize_t n)
{
    if (!has_hex_prefix(s, n) || (n & 1))
        return DECLINE;
    size_t size = ((size_t)n - 2) / 2;
    if (reserve(b, size + 9) < 0)
        return ERROR;
    if (size == 1) {
        uint8_t byte;
        if (!unhex(&byte, s + 2, 2))
            return DECLINE;
        if (byte < 0x80) {
            b->data[b->len++] = byte;
            return OK;
        }
    }
    size_t start = b->len;
    (void)put_prefix(b, size, 0x80);  /* room reserved above */
    if (!unhex(b->data + b->len, s + 2, 2 * size)) {
        b->len = start;
        return DECLINE;
    }
    b->len += size;
    return OK;
}

static int put_quantity(Buffer *b, PyObject *dict, PyObject *key)
{
    const char *s;
    Py_ssize_t n;
    int r = get_str(dict, key, &s, &n, NULL);
    return r == OK ? put_quantity_str(b, s, n) : r;
}

static int put_data(Buffer *b, PyObject *dict, PyObject *key)
{
    const char *s;
    Py_ssize_t n;
    int r = get_str(dict, key, &s, &n, NULL);
    return r == OK ? put_data_str(b, s, n) : r;
}

/* An address, or the empty string for none (a contract creation's `to`). */
static int put_address(Buffer *b, PyObject *dict, PyObject *key)
{
    const char *s;
    Py_ssize_t n;
    int missing;
    int r = get_str(dict, key, &s, &n, &missing);
    if (r == DECLINE && missing)
        return put_byte(b, 0x80) < 0 ? ERROR : OK;
    if (r != OK)
        return r;
    if (n == 2 && has_hex_prefix(s, n))
        return put_byte(b, 0x80) < 0 ? ERROR : OK;
    return put_data_str(b, s, n);
}

/* A list of hex strings (topics, storage keys, blob hashes), each as rlp(bytes). */
static int put_data_list(Buffer *b, PyObject *list)
{
    if (!PyList_Check(list))
        return DECLINE;
    size_t start = b->len;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        if (!PyUnicode_Check(item) || !PyUnicode_IS_ASCII(item))
            return DECLINE;
        int r = put_data_str(b, (const char *)PyUnicode_DATA(item), PyUnicode_GET_LENGTH(item));
        if (r != OK)
            return r;
    }
    return end_list(b, start) < 0 ? ERROR : OK;
}

/* The value of a "type" or other small quantity of at most `digits` hex digits (at most 15);
 * DECLINE otherwise. */
static int small_quantity(PyObject *dict, PyObject *key, long *out, int *missing, Py_ssize_t digits)
{
    const char *s;
    Py_ssize_t n;
    int r = get_str(dict, key, &s, &n, missing);
    if (r != OK)
        return r;
    if (!has_hex_prefix(s, n) || n == 2 || n > 2 + digits)
        return DECLINE;
    long value = 0;
    for (Py_ssize_t i = 2; i < n; i++) {
        int nibble = NIBBLE[(uint8_t)s[i]];
        if (nibble < 0)
            return DECLINE;
        value = value << 4 | nibble;
    }
    *out = value;
    return OK;
}

typedef int (*PutItem)(Buffer *b, PyObject *item, void *context);

/* put_item(item) for each item of `list`, the list and each item held while it is read: a dict
 * lookup can run Python code (a key's __eq__, from a caller's own objects) that changes or frees
 * what is only borrowed. */
static int put_each(Buffer *b, PyObject *list, PutItem put_item, void *context)
{
    int r = OK;
    Py_INCREF(list);
    for (Py_ssize_t i = 0; r == OK && i < PyList_GET_SIZE(list); i++) {
        PyObject *item = Py_NewRef(PyList_GET_ITEM(list, i));
        r = put_item(b, item, context);
        Py_DECREF(item);
    }
    Py_DECREF(list);
    return r;
}

#endif
