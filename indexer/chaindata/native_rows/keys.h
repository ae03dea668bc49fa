/* The keys each line reads, as slots: one array of values per call, filled by walking a dict once
 * (`read_dict`) or by one lookup (`lookup`), every value held until the line is made. The keys a
 * row does not store elsewhere go to its `extra`, which is Python's to write: a dict with a key
 * outside its map (rows.py's `_*_KNOWN`, given to `configure`) is declined. Part of
 * _native_rows.c. */

#ifndef NATIVE_ROWS_KEYS_H
#define NATIVE_ROWS_KEYS_H

#include <Python.h>

#include "../native_shared/hex.h"
#include "line.h"

/* The keys of each dict that rows.py's line functions read, in any order. */
#define BLOCK_READ(X) X(B, hash) X(B, parentHash) X(B, timestamp) X(B, miner) X(B, gasUsed) X(B, gasLimit) \
    X(B, baseFeePerGas) X(B, size) X(B, extraData) X(B, stateRoot) X(B, transactionsRoot) X(B, receiptsRoot) \
    X(B, nonce) X(B, mixHash) X(B, sha3Uncles) X(B, difficulty) X(B, totalDifficulty) X(B, withdrawalsRoot) \
    X(B, withdrawals) X(B, blobGasUsed) X(B, excessBlobGas) X(B, parentBeaconBlockRoot) X(B, requestsHash) \
    X(B, logsBloom) X(B, uncles)
#define TRANSACTION_READ(X) X(T, hash) X(T, from) X(T, to) X(T, type) X(T, blockHash) X(T, blockNumber) \
    X(T, transactionIndex) X(T, blockTimestamp) X(T, value) X(T, gas) X(T, gasPrice) X(T, maxFeePerGas) \
    X(T, maxPriorityFeePerGas) X(T, nonce) X(T, chainId) X(T, v) X(T, r) X(T, s) X(T, yParity) \
    X(T, maxFeePerBlobGas) X(T, input) X(T, blobVersionedHashes) X(T, accessList) X(T, authorizationList)
#define RECEIPT_READ(X) X(R, transactionHash) X(R, blockHash) X(R, transactionIndex) X(R, blockNumber) \
    X(R, blockTimestamp) X(R, from) X(R, to) X(R, type) X(R, status) X(R, gasUsed) X(R, cumulativeGasUsed) \
    X(R, effectiveGasPrice) X(R, contractAddress) X(R, root) X(R, blobGasUsed) X(R, blobGasPrice) X(R, logsBloom)
#define LOG_READ(X) X(L, logIndex) X(L, address) X(L, topics) X(L, data) X(L, blockHash) X(L, blockNumber) \
    X(L, transactionHash) X(L, transactionIndex) X(L, blockTimestamp) X(L, removed)
#define WITHDRAWAL_READ(X) X(W, index) X(W, validatorIndex) X(W, address) X(W, amount)

#define SLOT(prefix, key) prefix##_##key,
#define NAME(prefix, key) #key,

/* Each line's slots: its dicts' keys, then the arguments and the values looked up. */
enum { BLOCK_READ(SLOT) B_NUMBER, B_TRANSACTION_COUNT, B_LOG_COUNT, BLOCK_SLOTS };
enum { TRANSACTION_READ(SLOT) RECEIPT_READ(SLOT) T_NUMBER, T_INDEX, T_BLOCK_HASH, T_BLOCK_NUMBER,
       T_BLOCK_TIMESTAMP, TRANSACTION_SLOTS };
enum { LOG_READ(SLOT) L_NUMBER, L_INDEX, L_TX_HASH_FIELD, L_BLOCK_HASH, L_BLOCK_NUMBER, L_BLOCK_TIMESTAMP,
       L_TX_HASH, L_POSITION, LOG_SLOTS };
enum { WITHDRAWAL_READ(SLOT) W_NUMBER, W_POSITION, WITHDRAWAL_SLOTS };

static const char *const BLOCK_NAMES[] = {BLOCK_READ(NAME)};
static const char *const TRANSACTION_NAMES[] = {TRANSACTION_READ(NAME)};
static const char *const RECEIPT_NAMES[] = {RECEIPT_READ(NAME)};
static const char *const LOG_NAMES[] = {LOG_READ(NAME)};
static const char *const WITHDRAWAL_NAMES[] = {WITHDRAWAL_READ(NAME)};

#define COUNT(names) ((int)(sizeof(names) / sizeof(names[0])))

/* A known key that the line does not read (a block's `transactions`, a receipt's `logs`). */
#define UNREAD (-1)

/* key -> slot (an int) for each key of `known`: its slot where it is one of `names` (slots from
 * `first` on), UNREAD otherwise; a key of `names` that is not known is left out, so that a dict
 * holding it is declined, as Python puts it in `extra`. */
static PyObject *map_of(PyObject *known, const char *const *names, int count, int first)
{
    if (!PyAnySet_Check(known)) {
        PyErr_SetString(PyExc_TypeError, "configure: the known keys are a set of str");
        return NULL;
    }
    PyObject *map = PyDict_New(), *iterator = map ? PyObject_GetIter(known) : NULL, *key;
    while (iterator && (key = PyIter_Next(iterator))) {
        int slot = UNREAD;
        for (int i = 0; PyUnicode_CheckExact(key) && i < count; i++)
            if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0)
                slot = first + i;
        PyObject *value = PyUnicode_CheckExact(key) ? PyLong_FromLong(slot) : NULL;
        if (value == NULL && !PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "configure: the known keys are a set of str");
        int failed = value == NULL || PyDict_SetItem(map, key, value) < 0;
        Py_XDECREF(value);
        Py_DECREF(key);
        if (failed)
            break;
    }
    Py_XDECREF(iterator);
    if (PyErr_Occurred())
        Py_CLEAR(map);
    return map;
}

/* A map, and the slot of each key object it was asked for lately, by the object's address:
 * msgspec (and orjson) give the dicts of one answer the same str object for each key, so most
 * keys are found here without hashing or comparing characters. A key here is held, so that its
 * address cannot become another str's. */
#define SEEN 128

typedef struct {
    PyObject *map;
    struct {
        PyObject *key;
        long slot;
    } seen[SEEN];
} Keys;

static void keys_set(Keys *keys, PyObject *map)
{
    Py_XSETREF(keys->map, map);
    for (int i = 0; i < SEEN; i++)
        Py_CLEAR(keys->seen[i].key);
}

/* The slot of `key` (a str), UNREAD, or DECLINE for a key the map does not know. Forgetting a
 * key seen before frees no more than a str: no Python code runs. */
static int slot_of(Keys *keys, PyObject *key, long *slot)
{
    size_t at = (size_t)(((uintptr_t)key * 0x9E3779B97F4A7C15u) >> 32) % SEEN;
    if (keys->seen[at].key == key) {
        *slot = keys->seen[at].slot;
        return OK;
    }
    PyObject *where = PyDict_GetItemWithError(keys->map, key);
    if (where == NULL)
        return PyErr_Occurred() ? ERROR : DECLINE;
    *slot = PyLong_AsLong(where);
    Py_XSETREF(keys->seen[at].key, Py_NewRef(key));
    keys->seen[at].slot = *slot;
    return OK;
}

/* Each value of `dict` into its slot, held. No Python code runs, so nothing read can change
 * meanwhile: the keys must be str, compared with the map's own str keys. */
static int read_dict(PyObject *dict, Keys *keys, PyObject **slot)
{
    Py_ssize_t at = 0;
    PyObject *key, *value;
    long i;
    if (keys->map == NULL || !PyDict_CheckExact(dict))
        return DECLINE;
    while (PyDict_Next(dict, &at, &key, &value)) {
        if (!PyUnicode_CheckExact(key))
            return DECLINE;
        TRY(slot_of(keys, key, &i));
        if (i != UNREAD)
            slot[i] = Py_NewRef(value);
    }
    return OK;
}

/* dict[key], held in *slot; DECLINE where Python's lookup would raise. A lookup may run a
 * caller's key's __eq__, which may change anything not held. */
static int lookup(PyObject *dict, PyObject *key, PyObject **slot)
{
    if (!PyDict_CheckExact(dict))
        return DECLINE;
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value == NULL)
        return PyErr_Occurred() ? fault() : DECLINE;
    *slot = Py_NewRef(value);
    return OK;
}

static void release(PyObject **slot, int count)
{
    for (int i = 0; i < count; i++)
        Py_CLEAR(slot[i]);
}

#endif
