/* A byte buffer that grows by doubling: the RLP the root checks make (native_roots/rlp.h) and the
 * token transfers' COPY data (native_copy/transfers.h). Its memory is PyMem_Raw's, so it can grow
 * without the GIL: free it with PyMem_RawFree. */

#ifndef NATIVE_SHARED_BUFFER_H
#define NATIVE_SHARED_BUFFER_H

#include <Python.h>
#include <stdint.h>

typedef struct {
    uint8_t *data;
    size_t len, cap;
} Buffer;

/* Room for `more` bytes after the buffer's `len`; -1 where there is none to be had (the buffer
 * as it was, no Python error set). */
static int grow(Buffer *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    if (more > PY_SSIZE_T_MAX / 2 - b->len)
        return -1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *data = PyMem_RawRealloc(b->data, cap);
    if (data == NULL)
        return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

#endif
