/* A block's transactions, receipts and withdrawals roots recomputed in one pass from the node's
 * JSON (the dicts msgspec made of it): hex digits to RLP to the ordered trie to keccak-256, with
 * no Python object per field. The pure-Python check (roots.py, json_encodings.py,
 * ordered_trie.py) is the reference: `roots_match` answers 1 only where every root was proven
 * equal to the header's, and 0 for anything else (a root that differs, a type or a value it does
 * not read, a receipt without a bloom of the right length...), so that the Python check decides
 * and words every such case itself. Built by the normal install where a C compiler exists
 * (scripts/build_native.py); without it the Python check does all the work (BENCHMARKS.md,
 * "Root checks in C"). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Each part is a header of static functions, bottom up, so that the compiler sees one unit
 * and inlines across them. */
#include "native_roots/keccak.h"
#include "native_roots/keccak_many.h"
#include "native_roots/keys.h"
#include "native_roots/rlp.h"
#include "native_roots/transactions.h"
#include "native_roots/receipts.h"
#include "native_roots/trie.h"

/* ---- the Python functions -------------------------------------------------------------------- */

typedef struct {
    Buffer buffer;
    size_t *ends;
    size_t count, cap;
} Encodings;

static int end_encoding(Encodings *e)
{
    if (e->count == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 64;
        size_t *ends = PyMem_Realloc(e->ends, cap * sizeof(size_t));
        if (ends == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        e->ends = ends;
        e->cap = cap;
    }
    e->ends[e->count++] = e->buffer.len;
    return 0;
}

static void clear(Encodings *e)
{
    PyMem_RawFree(e->buffer.data);
    PyMem_Free(e->ends);
    memset(e, 0, sizeof *e);
}

/* The header's root as 32 bytes; DECLINE unless "0x" and 64 hex digits. */
static int header_root(PyObject *block, PyObject *key, uint8_t out[32], int *missing)
{
    const char *s;
    Py_ssize_t n;
    int r = get_str(block, key, &s, &n, missing);
    if (r != OK)
        return r;
    if (n != 66 || !has_hex_prefix(s, n) || !unhex(out, s + 2, 64))
        return DECLINE;
    return OK;
}

static int compare_root(Encodings *e, const uint8_t expected[32])
{
    uint8_t root[32];
    if (trie_root(root, e->buffer.data, e->ends, e->count) < 0)
        return ERROR;
    return memcmp(root, expected, 32) == 0 ? OK : DECLINE;
}

/* Each encoding of `list`'s items, as `put_item` makes them, one after another in `e`; the list
 * and each item held while read (see put_each). */
static int put_encodings(Encodings *e, PyObject *list, PutItem put_item, void *context)
{
    int r = OK;
    Py_INCREF(list);
    for (Py_ssize_t i = 0; r == OK && i < PyList_GET_SIZE(list); i++) {
        PyObject *item = Py_NewRef(PyList_GET_ITEM(list, i));
        r = put_item(&e->buffer, item, context);
        Py_DECREF(item);
        if (r == OK && end_encoding(e) < 0)
            r = ERROR;
    }
    Py_DECREF(list);
    return r;
}

typedef struct {
    uint8_t *types;  /* the type of each transaction read, 0 for one above 0x7f */
    Py_ssize_t read, room;
    int deposits;
} Types;

static int put_typed_transaction(Buffer *b, PyObject *tx, void *context)
{
    Types *types = context;
    long kind = 0;
    int r = put_transaction(b, tx, &kind);
    if (r != OK)
        return r;
    if (types->read == types->room)
        return DECLINE;  /* the list grew while it was read */
    types->types[types->read++] = kind < 0x80 ? (uint8_t)kind : 0;
    types->deposits |= kind == 0x7e;
    return OK;
}

typedef struct {
    Types *types;
    Py_ssize_t index;
    int recompute;
} Receipts;

static int put_receipt_of(Buffer *b, PyObject *receipt, void *context)
{
    Receipts *receipts = context;
    Py_ssize_t i = receipts->index++;
    return put_receipt(b, receipt, i < receipts->types->read ? receipts->types->types[i] : 0, receipts->recompute);
}

static int put_withdrawal_item(Buffer *b, PyObject *w, void *context)
{
    return put_withdrawal(b, w);
}

static int check_transactions(PyObject *block, PyObject *receipts, int recompute, Encodings *e, Types *types)
{
    static const uint8_t zero[32];
    uint8_t expected[32];
    TRY(header_root(block, K_transactionsRoot, expected, NULL));
    if (memcmp(expected, zero, 32) == 0)
        return DECLINE;
    PyObject *txs;
    TRY(get_list(block, K_transactions, &txs));
    types->room = PyList_GET_SIZE(txs);
    types->types = PyMem_Malloc(types->room ? (size_t)types->room : 1);
    if (types->types == NULL) {
        PyErr_NoMemory();
        return ERROR;
    }
    TRY(put_encodings(e, txs, put_typed_transaction, types));
    TRY(compare_root(e, expected));
    TRY(header_root(block, K_receiptsRoot, expected, NULL));
    if (memcmp(expected, zero, 32) == 0)
        return DECLINE;
    e->buffer.len = 0, e->count = 0;
    Receipts context = {types, 0, recompute};
    TRY(put_encodings(e, receipts, put_receipt_of, &context));
    return compare_root(e, expected);
}

static int check(PyObject *block, PyObject *receipts, int recompute, Encodings *e)
{
    uint8_t expected[32];
    int missing;
    long number;
    if (!PyDict_Check(block) || !PyList_Check(receipts))
        return DECLINE;
    /* The Python check reads the number first: a block without a readable one is its to word. */
    TRY(small_quantity(block, K_number, &number, NULL, 16));
    Types types = {NULL, 0, 0, 0};
    int r = check_transactions(block, receipts, recompute, e, &types);
    PyMem_Free(types.types);
    if (r != OK)
        return r;
    r = header_root(block, K_withdrawalsRoot, expected, &missing);
    if (r == DECLINE && missing)
        return OK;
    if (r != OK)
        return r;
    PyObject *withdrawals = PyDict_GetItemWithError(block, K_withdrawals);
    if (withdrawals == NULL && PyErr_Occurred())
        return ERROR;
    if (withdrawals != NULL && withdrawals != Py_None && !PyList_Check(withdrawals))
        return DECLINE;
    int none = withdrawals == NULL || withdrawals == Py_None || PyList_GET_SIZE(withdrawals) == 0;
    if (none && types.deposits && memcmp(expected, EMPTY_ROOT, 32) != 0)
        return DECLINE;  /* the OP stack since Isthmus: the Python check words it */
    e->buffer.len = 0, e->count = 0;
    if (!none)
        TRY(put_encodings(e, withdrawals, put_withdrawal_item, NULL));
    return compare_root(e, expected);
}

static PyObject *roots_match(PyObject *self, PyObject *args)
{
    PyObject *block, *receipts;
    int recompute = 1;
    if (!PyArg_ParseTuple(args, "OO|p:roots_match", &block, &receipts, &recompute))
        return NULL;
    Encodings e = {0};
    int r = check(block, receipts, recompute, &e);
    clear(&e);
    if (r == ERROR)
        return NULL;
    return PyBool_FromLong(r == OK);
}

static PyObject *encoding_or_none(int r, Buffer *b)
{
    PyObject *result = r == ERROR ? NULL
        : r == OK ? PyBytes_FromStringAndSize((const char *)b->data, (Py_ssize_t)b->len)
        : Py_NewRef(Py_None);
    PyMem_RawFree(b->data);
    return result;
}

static PyObject *encode_transaction(PyObject *self, PyObject *tx)
{
    Buffer b = {0};
    long kind;
    return encoding_or_none(put_transaction(&b, tx, &kind), &b);
}

static PyObject *encode_receipt(PyObject *self, PyObject *args)
{
    PyObject *receipt;
    long tx_type = 0;
    int recompute = 1;
    if (!PyArg_ParseTuple(args, "O|lp:encode_receipt", &receipt, &tx_type, &recompute))
        return NULL;
    if (tx_type < 0 || tx_type > 0xff) {
        PyErr_SetString(PyExc_ValueError, "encode_receipt: tx_type is a byte (0 to 255)");
        return NULL;
    }
    Buffer b = {0};
    return encoding_or_none(put_receipt(&b, receipt, tx_type, recompute), &b);
}

static PyObject *ordered_trie_root(PyObject *self, PyObject *values)
{
    if (!PyList_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "ordered_trie_root takes a list of bytes");
        return NULL;
    }
    Encodings e = {0};
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++) {
        PyObject *value = PyList_GET_ITEM(values, i);
        if (!PyBytes_Check(value)) {
            clear(&e);
            PyErr_SetString(PyExc_TypeError, "ordered_trie_root takes a list of bytes");
            return NULL;
        }
        if (put(&e.buffer, (const uint8_t *)PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value)) < 0
                || end_encoding(&e) < 0) {
            clear(&e);
            return NULL;
        }
    }
    uint8_t root[32];
    int failed = trie_root(root, e.buffer.data, e.ends, e.count);
    clear(&e);
    return failed ? NULL : PyBytes_FromStringAndSize((const char *)root, 32);
}

static PyObject *keccak(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"data", "portable", NULL};
    Py_buffer view;
    int portable = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|p", names, &view, &portable))
        return NULL;
    uint8_t out[32];
    Py_BEGIN_ALLOW_THREADS
    keccak256_with(portable ? keccak_f_any : NULL, view.buf, (size_t)view.len, out);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)out, 32);
}

static PyObject *keccak_many_of(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"messages", "way", NULL};
    PyObject *list;
    const char *name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!|z", names, &PyList_Type, &list, &name))
        return NULL;
    const ManyWay *way = name == NULL ? keccak_many_way : NULL;
    for (size_t i = 0; way == NULL && i < MANY_WAYS_COUNT; i++)
        if (strcmp(MANY_WAYS[i].name, name) == 0)
            way = &MANY_WAYS[i];
    if (way == NULL || !runs(way))
        return PyErr_Format(PyExc_ValueError, "keccak_many: no way '%s' on this processor", name);
    Py_ssize_t count = PyList_GET_SIZE(list);
    PyObject *hashes = PyList_New(count);
    Message *messages = PyMem_Malloc(count ? (size_t)count * sizeof(Message) : 1);
    if (hashes == NULL || messages == NULL) {
        Py_XDECREF(hashes);
        PyMem_Free(messages);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *data = PyList_GET_ITEM(list, i), *hash = PyBytes_FromStringAndSize(NULL, 32);
        if (hash == NULL || !PyBytes_Check(data)) {
            Py_XDECREF(hash);
            Py_DECREF(hashes);
            PyMem_Free(messages);
            if (hash != NULL)
                PyErr_SetString(PyExc_TypeError, "keccak_many takes a list of bytes");
            return NULL;
        }
        PyList_SET_ITEM(hashes, i, hash);
        messages[i] = (Message){NULL, 0, (const uint8_t *)PyBytes_AS_STRING(data), (size_t)PyBytes_GET_SIZE(data),
                                (uint8_t *)PyBytes_AS_STRING(hash)};
    }
    way->hash(messages, (size_t)count);
    PyMem_Free(messages);
    return hashes;
}

static PyMethodDef METHODS[] = {
    {"roots_match", roots_match, METH_VARARGS,
     "roots_match(block, receipts, recompute_blooms=True) -> bool: True when the transactions, receipts and "
     "withdrawals roots recomputed from the JSON equal the header's (and, with recompute_blooms, every bloom "
     "sent equals its logs'); False leaves the answer to the Python check."},
    {"encode_transaction", encode_transaction, METH_O,
     "encode_transaction(tx) -> bytes | None: the transaction as its trie holds it, None where not read here."},
    {"encode_receipt", encode_receipt, METH_VARARGS,
     "encode_receipt(receipt, tx_type=0, recompute_bloom=True) -> bytes | None: the receipt as its trie holds it, "
     "None where not read here."},
    {"ordered_trie_root", ordered_trie_root, METH_O,
     "ordered_trie_root(values) -> bytes: the root of the trie mapping rlp(i) to values[i]."},
    {"keccak", (PyCFunction)(void (*)(void))keccak, METH_VARARGS | METH_KEYWORDS,
     "keccak(data, portable=False) -> bytes: keccak-256; with portable, by the permutation any processor runs "
     "(KECCAK_PERMUTATION names the one used otherwise)."},
    {"keccak_many", (PyCFunction)(void (*)(void))keccak_many_of, METH_VARARGS | METH_KEYWORDS,
     "keccak_many(messages, way=None) -> list[bytes]: the keccak-256 of each, in the way KECCAK_MANY names (the "
     "fastest this processor runs) or the one named (\"avx512\", \"avx2\", \"one by one\"); each hands a count too small "
     "for it to the next."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_native_roots", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native_roots(void)
{
    init_nibbles();
    init_hex_pairs();
    init_keccak();
    init_keccak_many();
    if (init_keys() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&MODULE);
    if (module != NULL && PyModule_AddStringConstant(module, "KECCAK_PERMUTATION",
                                                     keccak_f == keccak_f_any ? "any" : "bmi2") < 0)
        Py_CLEAR(module);
    if (module != NULL && PyModule_AddStringConstant(module, "KECCAK_MANY", keccak_many_way->name) < 0)
        Py_CLEAR(module);
    return module;
}
