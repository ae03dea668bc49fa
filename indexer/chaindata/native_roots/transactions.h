/* A transaction as the transactions trie holds it, from the node's JSON, as json_encodings.py
 * makes it: signed types 0 to 4, OP-stack deposits and Arbitrum's internal transactions. Part
 * of _native_roots.c. */

#ifndef NATIVE_ROOTS_TRANSACTIONS_H
#define NATIVE_ROOTS_TRANSACTIONS_H

#include "keys.h"
#include "rlp.h"

/* A typed transaction's (or authorization's) y parity: `yParity`, or from `v` where a node sends
 * only that (0 or 1, or 27/28 from some), as encodings.y_parity. */
static int put_y_parity(Buffer *b, PyObject *dict)
{
    int missing;
    const char *s;
    Py_ssize_t n;
    int r = get_str(dict, K_yParity, &s, &n, &missing);
    if (r == OK)
        return put_quantity_str(b, s, n);
    if (!missing)
        return r;
    long v;
    TRY(small_quantity(dict, K_v, &v, NULL, 4));
    v = v < 2 ? v : 1 - (v & 1);
    return put_byte(b, v ? 0x01 : 0x80) < 0 ? ERROR : OK;
}

static int put_access_entry(Buffer *b, PyObject *entry, void *context)
{
    if (!PyDict_Check(entry))
        return DECLINE;
    size_t start = b->len;
    TRY(put_data(b, entry, K_address));
    PyObject *keys = PyDict_GetItemWithError(entry, K_storageKeys);
    if (keys == NULL)
        return PyErr_Occurred() ? ERROR : DECLINE;
    TRY(put_data_list(b, keys));  /* no Python code runs while it reads the keys */
    return end_list(b, start) < 0 ? ERROR : OK;
}

static int put_access_list(Buffer *b, PyObject *tx)
{
    PyObject *list = PyDict_GetItemWithError(tx, K_accessList);
    if (list == NULL && PyErr_Occurred())
        return ERROR;
    if (list == NULL || list == Py_None)
        return put_byte(b, 0xc0) < 0 ? ERROR : OK;
    if (!PyList_Check(list))
        return DECLINE;
    size_t start = b->len;
    TRY(put_each(b, list, put_access_entry, NULL));
    return end_list(b, start) < 0 ? ERROR : OK;
}

/* One entry of an EIP-7702 authorization list: [chainId, address, nonce, yParity, r, s]. */
static int put_authorization(Buffer *b, PyObject *a, void *context)
{
    if (!PyDict_Check(a))
        return DECLINE;
    size_t start = b->len;
    TRY(put_quantity(b, a, K_chainId));
    TRY(put_data(b, a, K_address));
    TRY(put_quantity(b, a, K_nonce));
    TRY(put_y_parity(b, a));
    TRY(put_quantity(b, a, K_r));
    TRY(put_quantity(b, a, K_s));
    return end_list(b, start) < 0 ? ERROR : OK;
}

static int put_authorizations(Buffer *b, PyObject *tx)
{
    PyObject *list;
    TRY(get_list(tx, K_authorizationList, &list));
    size_t start = b->len;
    TRY(put_each(b, list, put_authorization, NULL));
    return end_list(b, start) < 0 ? ERROR : OK;
}

static int present(PyObject *dict, PyObject *key, int not_none)
{
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value == NULL)
        return PyErr_Occurred() ? ERROR : 0;
    return not_none ? value != Py_None : 1;
}

/* The type the fields imply, for a node that predates typed transactions and sends none
 * (encodings.transaction_type). */
static int implied_type(PyObject *tx, long *kind)
{
    int p;
    if ((p = present(tx, K_authorizationList, 0)) != 0)
        return p < 0 ? ERROR : (*kind = 4, OK);
    if ((p = present(tx, K_blobVersionedHashes, 0)) != 0 || (p = present(tx, K_maxFeePerBlobGas, 0)) != 0)
        return p < 0 ? ERROR : (*kind = 3, OK);
    if ((p = present(tx, K_maxFeePerGas, 1)) != 0)
        return p < 0 ? ERROR : (*kind = 2, OK);
    if ((p = present(tx, K_accessList, 1)) != 0)
        return p < 0 ? ERROR : (*kind = 1, OK);
    *kind = 0;
    return OK;
}

/* A transaction as the transactions trie holds it, appended to `b`; `*kind` its type. Signed
 * types 0 to 4, OP-stack deposits and Arbitrum's internal transactions; anything else (Arbitrum's
 * other types, a transaction with no signature or no yParity) is DECLINE. */
static int put_transaction(Buffer *b, PyObject *tx, long *kind)
{
    if (!PyDict_Check(tx))
        return DECLINE;
    int missing;
    int r = small_quantity(tx, K_type, kind, &missing, 4);
    if (r == DECLINE && missing) {
        r = implied_type(tx, kind);
    }
    if (r != OK)
        return r;
    PyObject *data_key = K_input;
    PyObject *input = PyDict_GetItemWithError(tx, K_input);
    if (input == NULL && PyErr_Occurred())
        return ERROR;
    if (input == NULL || input == Py_None)
        data_key = K_data;
    size_t start;
    if (*kind == 0x7e) {
        PyObject *mint;
        if (PyDict_GetItemWithError(tx, K_sourceHash) == NULL)
            return PyErr_Occurred() ? ERROR : DECLINE;
        TRY(put_byte(b, 0x7e) < 0 ? ERROR : OK);
        start = b->len;
        TRY(put_data(b, tx, K_sourceHash));
        TRY(put_data(b, tx, K_from));
        TRY(put_address(b, tx, K_to));
        mint = PyDict_GetItemWithError(tx, K_mint);
        if (mint == NULL && PyErr_Occurred())
            return ERROR;
        if (mint == NULL || mint == Py_None || (PyUnicode_Check(mint) && PyUnicode_GET_LENGTH(mint) == 0))
            TRY(put_byte(b, 0x80) < 0 ? ERROR : OK);
        else
            TRY(put_quantity(b, tx, K_mint));
        TRY(put_quantity(b, tx, K_value));
        TRY(put_quantity(b, tx, K_gas));
        PyObject *system = PyDict_GetItemWithError(tx, K_isSystemTx);
        if (system == NULL && PyErr_Occurred())
            return ERROR;
        if (system != NULL && system != Py_True && system != Py_False && system != Py_None)
            return DECLINE;
        TRY(put_byte(b, system == Py_True ? 0x01 : 0x80) < 0 ? ERROR : OK);
        TRY(put_data(b, tx, K_input));
        return end_list(b, start) < 0 ? ERROR : OK;
    }
    if (*kind == 0x6a) {  /* Arbitrum's ArbOS internal transaction: rlp([chainId, data]) */
        TRY(put_byte(b, 0x6a) < 0 ? ERROR : OK);
        start = b->len;
        TRY(put_quantity(b, tx, K_chainId));
        TRY(put_data(b, tx, K_input));
        return end_list(b, start) < 0 ? ERROR : OK;
    }
    if (*kind < 0 || *kind > 4)
        return DECLINE;
    if (*kind > 0)
        TRY(put_byte(b, (uint8_t)*kind) < 0 ? ERROR : OK);
    start = b->len;
    if (*kind == 0) {
        TRY(put_quantity(b, tx, K_nonce));
        TRY(put_quantity(b, tx, K_gasPrice));
        TRY(put_quantity(b, tx, K_gas));
        TRY(put_address(b, tx, K_to));
        TRY(put_quantity(b, tx, K_value));
        TRY(put_data(b, tx, data_key));
        TRY(put_quantity(b, tx, K_v));
    } else {
        TRY(put_quantity(b, tx, K_chainId));
        TRY(put_quantity(b, tx, K_nonce));
        if (*kind == 1) {
            TRY(put_quantity(b, tx, K_gasPrice));
        } else {
            TRY(put_quantity(b, tx, K_maxPriorityFeePerGas));
            TRY(put_quantity(b, tx, K_maxFeePerGas));
        }
        TRY(put_quantity(b, tx, K_gas));
        TRY(put_address(b, tx, K_to));
        TRY(put_quantity(b, tx, K_value));
        TRY(put_data(b, tx, data_key));
        TRY(put_access_list(b, tx));
        if (*kind == 3) {
            TRY(put_quantity(b, tx, K_maxFeePerBlobGas));
            PyObject *hashes = PyDict_GetItemWithError(tx, K_blobVersionedHashes);
            if (hashes == NULL)
                return PyErr_Occurred() ? ERROR : DECLINE;
            TRY(put_data_list(b, hashes));
        } else if (*kind == 4) {
            TRY(put_authorizations(b, tx));
        }
        TRY(put_y_parity(b, tx));
    }
    size_t signature = b->len;
    TRY(put_quantity(b, tx, K_r));
    TRY(put_quantity(b, tx, K_s));
    if (b->len - signature == 2 && b->data[signature] == 0x80 && b->data[signature + 1] == 0x80)
        return DECLINE;  /* unsigned: a system transaction, which the Python check words */
    return end_list(b, start) < 0 ? ERROR : OK;
}

#endif
