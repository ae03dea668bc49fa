/* A COPY line put together as a list of pieces: the node's own characters where the line repeats
 * them (a hash's digits, a transaction's input), literals, and the few characters made here
 * (decimals, timestamps) in a scratch area; copied once, at the end, into the str returned, so
 * that an 8 MB input is copied once. Part of _native_rows.c. */

#ifndef NATIVE_ROWS_LINE_H
#define NATIVE_ROWS_LINE_H

#include <Python.h>
#include <string.h>

#include "../native_shared/hex.h"

/* A transaction's line takes about 80 pieces and 1,600 scratch characters (20 quantities of at
 * most 78 digits); a line that needs more (a list of hundreds of hashes) is left to Python. */
#define MAX_PIECES 256
#define SCRATCH 2048

typedef struct {
    const char *s;
    Py_ssize_t n;
} Piece;

typedef struct {
    Piece piece[MAX_PIECES];
    int pieces;
    Py_ssize_t length;
    char scratch[SCRATCH];
    size_t used;
    /* What a piece points into that no slot holds (a list's items, a jsonb text): held until the
     * line is copied, as Python code run meanwhile (a callback) could free it otherwise. */
    PyObject *held[MAX_PIECES];
    int holds;
} Line;

static void line_init(Line *line)
{
    line->pieces = 0;
    line->length = 0;
    line->used = 0;
    line->holds = 0;
}

static int add(Line *line, const char *s, Py_ssize_t n)
{
    if (line->pieces == MAX_PIECES || n > PY_SSIZE_T_MAX - line->length)
        return DECLINE;
    line->piece[line->pieces++] = (Piece){s, n};
    line->length += n;
    return OK;
}

#define ADD_LITERAL(line, text) add((line), (text), (Py_ssize_t)sizeof(text) - 1)

/* `n` characters of the scratch area, or NULL when it is full. */
static char *room(Line *line, size_t n)
{
    if (n > SCRATCH - line->used)
        return NULL;
    char *at = line->scratch + line->used;
    line->used += n;
    return at;
}

/* `n` characters copied into the scratch area, as a piece. */
static int add_copy(Line *line, const char *s, size_t n)
{
    char *at = room(line, n);
    if (at == NULL)
        return DECLINE;
    memcpy(at, s, n);
    return add(line, at, (Py_ssize_t)n);
}

static int hold(Line *line, PyObject *object)
{
    if (line->holds == MAX_PIECES)
        return DECLINE;
    line->held[line->holds++] = Py_NewRef(object);
    return OK;
}

static void line_release(Line *line)
{
    while (line->holds)
        Py_DECREF(line->held[--line->holds]);
}

/* After Python code failed (a caller's key's __eq__, the jsonb text of a value): an error the
 * data caused is Python's to make again and word (DECLINE); no memory, or an interrupt, is not
 * to be hidden (ERROR). */
static int fault(void)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError))
        return ERROR;
    PyErr_Clear();
    return DECLINE;
}

/* The pieces as one str of ASCII characters (every piece is), or NULL with MemoryError. */
static PyObject *line_str(Line *line)
{
    PyObject *text = PyUnicode_New(line->length, 127);
    if (text == NULL)
        return NULL;
    char *out = (char *)PyUnicode_1BYTE_DATA(text);
    for (int i = 0; i < line->pieces; i++) {
        memcpy(out, line->piece[i].s, (size_t)line->piece[i].n);
        out += line->piece[i].n;
    }
    return text;
}

#endif
