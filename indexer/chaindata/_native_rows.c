/* The COPY lines of rows.py (`block_line`, `transaction_line`, `log_line`, `withdrawal_line`)
 * made in C from the node's JSON (the dicts msgspec made of it), for the strict common form
 * only: exact dicts and str, hex as "0x" and digits, no key that would go to `extra`, the
 * checked keys spelled as the block spells them (the Python fast path). Each function answers
 * the very str the Python function returns, or None for anything else: then rows.py makes the
 * line, or raises with its own words, so both give the same rows on every input and differ in
 * speed only. Built by the install where a C compiler exists (scripts/build_native.py); without
 * it every line is made in Python (BENCHMARKS.md, "Rows encoded in C"). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Each part is a header of static functions, bottom up: one unit, inlined across. */
#include "native_shared/hex.h"
#include "native_rows/line.h"
#include "native_rows/fields.h"
#include "native_rows/keys.h"

/* rows.py's known keys of each dict, as slot maps, and its `_json`: given by `configure`. */
static Keys BLOCK_KEYS, TRANSACTION_KEYS, RECEIPT_KEYS, LOG_KEYS, WITHDRAWAL_KEYS;
static PyObject *JSON;
static PyObject *K_hash, *K_number, *K_timestamp, *K_transactionHash, *K_transactionIndex;
static PyObject *DEFAULT_TYPE;  /* a transaction's type where it has none: `tx.get("type", "0x0")` */

/* ---- the columns of each line --------------------------------------------------------------- */

/* How a column is made from its slot's value: one of fields.h's, or NONE for the `extra` of a
 * dict whose every key is known (`\N`). */
typedef enum { QUANTITY, DATA, TIMESTAMP, INTEGER, LIST_LENGTH, LONG_DATA, HASHES, JSON_LIST, TOPICS, MADE,
               NONE } Kind;

/* `required`: read as `item[key]`, a KeyError when left out; otherwise as `item.get(key)`. */
typedef struct {
    unsigned char slot, kind, required;
} Column;

#define ITEMS(array) ((int)(sizeof(array) / sizeof(array[0])))

static const Column BLOCK_LINE[] = {
    {B_NUMBER, INTEGER, 1}, {B_hash, DATA, 1}, {B_parentHash, DATA, 1}, {B_timestamp, TIMESTAMP, 1},
    {B_miner, DATA, 1}, {B_gasUsed, QUANTITY, 1}, {B_gasLimit, QUANTITY, 1}, {B_baseFeePerGas, QUANTITY, 0},
    {B_TRANSACTION_COUNT, INTEGER, 1}, {B_LOG_COUNT, INTEGER, 1}, {B_size, QUANTITY, 0}, {B_extraData, DATA, 1},
    {B_stateRoot, DATA, 1}, {B_transactionsRoot, DATA, 1}, {B_receiptsRoot, DATA, 1},
    {B_nonce, DATA, 0}, {B_mixHash, DATA, 0}, {B_sha3Uncles, DATA, 0}, {B_difficulty, QUANTITY, 0},
    {B_totalDifficulty, QUANTITY, 0}, {B_withdrawalsRoot, DATA, 0}, {B_withdrawals, LIST_LENGTH, 0},
    {B_blobGasUsed, QUANTITY, 0}, {B_excessBlobGas, QUANTITY, 0}, {B_parentBeaconBlockRoot, DATA, 0},
    {B_requestsHash, DATA, 0},
    {B_logsBloom, LONG_DATA, 1}, {B_uncles, HASHES, 0}, {0, NONE, 0},
};

static const Column TRANSACTION_LINE[] = {
    {T_NUMBER, INTEGER, 1}, {T_INDEX, INTEGER, 1}, {T_hash, DATA, 1}, {T_from, DATA, 1}, {T_to, DATA, 0},
    {T_value, QUANTITY, 1}, {T_gas, QUANTITY, 1}, {T_gasPrice, QUANTITY, 0}, {T_maxFeePerGas, QUANTITY, 0},
    {T_maxPriorityFeePerGas, QUANTITY, 0}, {T_nonce, QUANTITY, 1}, {T_type, QUANTITY, 0},
    {R_status, QUANTITY, 0}, {R_gasUsed, QUANTITY, 1}, {R_cumulativeGasUsed, QUANTITY, 1},
    {R_effectiveGasPrice, QUANTITY, 0}, {R_contractAddress, DATA, 0},
    {T_chainId, QUANTITY, 0}, {T_v, QUANTITY, 0}, {T_r, QUANTITY, 0}, {T_s, QUANTITY, 0}, {T_yParity, QUANTITY, 0},
    {T_maxFeePerBlobGas, QUANTITY, 0}, {R_root, DATA, 0}, {R_blobGasUsed, QUANTITY, 0},
    {R_blobGasPrice, QUANTITY, 0},
    {R_logsBloom, LONG_DATA, 1}, {T_input, LONG_DATA, 1}, {T_blobVersionedHashes, HASHES, 0},
    {T_accessList, JSON_LIST, 0}, {T_authorizationList, JSON_LIST, 0}, {0, NONE, 0}, {0, NONE, 0},
};

static const Column LOG_LINE[] = {
    {L_NUMBER, INTEGER, 1}, {L_logIndex, QUANTITY, 1}, {L_INDEX, INTEGER, 1}, {L_TX_HASH_FIELD, MADE, 1},
    {L_address, DATA, 1}, {L_topics, TOPICS, 1}, {L_data, LONG_DATA, 1}, {0, NONE, 0},
};

static const Column WITHDRAWAL_LINE[] = {
    {W_NUMBER, INTEGER, 1}, {W_POSITION, INTEGER, 1}, {W_index, QUANTITY, 1}, {W_validatorIndex, QUANTITY, 1},
    {W_address, DATA, 1}, {W_amount, QUANTITY, 1}, {0, NONE, 0},
};

static int put_column(Line *line, PyObject *v, Kind kind)
{
    switch (kind) {
    case QUANTITY: return put_quantity(line, v);
    case DATA: return put_data(line, v);
    case TIMESTAMP: return put_timestamp(line, v);
    case INTEGER: return put_count(line, v);
    case LIST_LENGTH: return put_length(line, v);
    case LONG_DATA: return put_long_data(line, v);
    case HASHES: return put_hashes(line, v);
    case JSON_LIST: return put_json(line, v, JSON);
    case TOPICS: return put_topics(line, v);
    case MADE: return put_made(line, v);
    case NONE: return put_null(line);
    }
    return DECLINE;
}

static int put_columns(Line *line, PyObject **slot, const Column *column, int count)
{
    for (int i = 0; i < count; i++) {
        PyObject *value = column[i].kind == NONE ? NULL : slot[column[i].slot];
        if (column[i].required && value == NULL)
            return DECLINE;
        if (i)
            TRY(ADD_LITERAL(line, "\t"));
        TRY(put_column(line, value, (Kind)column[i].kind));
    }
    return OK;
}

/* ---- the checks of the Python fast paths ---------------------------------------------------- */

/* Python's `value != expected` is False, known without running its code: both None, or both
 * the same str of ASCII. */
static int same(PyObject *value, PyObject *expected)
{
    if (value == Py_None || expected == Py_None)
        return value == expected;
    return is_ascii_str(value) && is_ascii_str(expected)
        && PyUnicode_GET_LENGTH(value) == PyUnicode_GET_LENGTH(expected)
        && memcmp(CHARS(value), CHARS(expected), (size_t)PyUnicode_GET_LENGTH(value)) == 0;
}

/* `item.get(key, expected) != expected` is False: left out, or the same. */
static int absent_or_same(PyObject *value, PyObject *expected)
{
    return value == NULL || same(value, expected);
}

/* A receipt's blockTimestamp sent as a JSON number (anvil), equal to the block's hex one. */
static int same_number(PyObject *stamp, PyObject *timestamp)
{
    uint64_t expected;
    int overflow;
    if (!PyLong_CheckExact(stamp) || !small_quantity(timestamp, &expected))
        return 0;
    long long value = PyLong_AsLongLongAndOverflow(stamp, &overflow);
    return !overflow && value >= 0 && (uint64_t)value == expected;
}

/* transaction_line's: the receipt belongs to the transaction (else Python raises), and every key
 * that repeats the block or the transaction is spelled as they spell it (else Python compares
 * by value in _check_transaction). */
static int transaction_checks(PyObject **s)
{
    uint64_t index, position;
    TRY(count_of(s[T_INDEX], &index));
    if (!s[T_hash] || !s[T_from] || !s[R_transactionHash] || !s[R_blockHash] || !s[R_transactionIndex])
        return DECLINE;
    if (!same(s[R_transactionHash], s[T_hash]) || !same(s[R_blockHash], s[T_BLOCK_HASH])
            || !small_quantity(s[R_transactionIndex], &position) || position != index)
        return DECLINE;
    PyObject *to = s[T_to] ? s[T_to] : Py_None, *stamp = s[R_blockTimestamp];
    return absent_or_same(s[T_blockHash], s[T_BLOCK_HASH]) && absent_or_same(s[T_blockNumber], s[T_BLOCK_NUMBER])
        && absent_or_same(s[T_transactionIndex], s[R_transactionIndex])
        && absent_or_same(s[T_blockTimestamp], s[T_BLOCK_TIMESTAMP])
        && absent_or_same(s[R_blockNumber], s[T_BLOCK_NUMBER])
        && (absent_or_same(stamp, s[T_BLOCK_TIMESTAMP]) || same_number(stamp, s[T_BLOCK_TIMESTAMP]))
        && absent_or_same(s[R_from], s[T_from]) && absent_or_same(s[R_to], to)
        && absent_or_same(s[R_type], s[T_type]) ? OK : DECLINE;
}

/* log_line's: the log belongs to the block and the transaction (else Python raises), and repeats
 * the block's number and timestamp and its transaction's position as they spell them, not
 * removed (else Python compares by value in _check_log). */
static int log_checks(PyObject **s)
{
    if (!s[L_blockHash] || !s[L_transactionHash] || !same(s[L_blockHash], s[L_BLOCK_HASH])
            || !same(s[L_transactionHash], s[L_TX_HASH]))
        return DECLINE;
    return absent_or_same(s[L_blockNumber], s[L_BLOCK_NUMBER]) && absent_or_same(s[L_transactionIndex], s[L_POSITION])
        && absent_or_same(s[L_blockTimestamp], s[L_BLOCK_TIMESTAMP])
        && (s[L_removed] == NULL || s[L_removed] == Py_False) ? OK : DECLINE;
}

/* ---- the lines ------------------------------------------------------------------------------ */

/* The caller's arguments from `first` on, into slots `slot`... (held, as every slot is). */
static void take(PyObject **s, int slot, PyObject *const *args, int first, int count)
{
    for (int i = 0; i < count; i++)
        s[slot + i] = Py_NewRef(args[first + i]);
}

static int make_block_line(Line *line, PyObject *const *args, PyObject **s)
{
    take(s, B_NUMBER, args, 1, 3);
    TRY(read_dict(args[0], &BLOCK_KEYS, s));
    return put_columns(line, s, BLOCK_LINE, ITEMS(BLOCK_LINE));
}

/* The block's hash, number and timestamp, which a transaction's and a log's lines check theirs
 * against, into three slots in a row from `slot`. */
static int read_block(PyObject *block, PyObject **slot)
{
    TRY(lookup(block, K_hash, &slot[0]));
    TRY(lookup(block, K_number, &slot[1]));
    return lookup(block, K_timestamp, &slot[2]);
}
_Static_assert(T_BLOCK_NUMBER == T_BLOCK_HASH + 1 && T_BLOCK_TIMESTAMP == T_BLOCK_HASH + 2
               && L_BLOCK_NUMBER == L_BLOCK_HASH + 1 && L_BLOCK_TIMESTAMP == L_BLOCK_HASH + 2,
               "the block's slots in a row");

/* The lookups first: they may run a caller's code; reading the dicts runs none. */
static int make_transaction_line(Line *line, PyObject *const *args, PyObject **s)
{
    PyObject *tx = args[0], *receipt = args[1], *block = args[2];
    take(s, T_NUMBER, args, 3, 2);
    TRY(read_block(block, &s[T_BLOCK_HASH]));
    TRY(read_dict(tx, &TRANSACTION_KEYS, s));
    TRY(read_dict(receipt, &RECEIPT_KEYS, s));
    if (s[T_type] == NULL)
        s[T_type] = Py_NewRef(DEFAULT_TYPE);
    TRY(transaction_checks(s));
    return put_columns(line, s, TRANSACTION_LINE, ITEMS(TRANSACTION_LINE));
}

static int make_log_line(Line *line, PyObject *const *args, PyObject **s)
{
    PyObject *entry = args[0], *receipt = args[1], *block = args[2];
    take(s, L_NUMBER, args, 3, 3);
    TRY(read_block(block, &s[L_BLOCK_HASH]));
    TRY(lookup(receipt, K_transactionHash, &s[L_TX_HASH]));
    TRY(lookup(receipt, K_transactionIndex, &s[L_POSITION]));
    TRY(read_dict(entry, &LOG_KEYS, s));
    TRY(log_checks(s));
    return put_columns(line, s, LOG_LINE, ITEMS(LOG_LINE));
}

static int make_withdrawal_line(Line *line, PyObject *const *args, PyObject **s)
{
    take(s, W_NUMBER, args, 1, 2);
    TRY(read_dict(args[0], &WITHDRAWAL_KEYS, s));
    return put_columns(line, s, WITHDRAWAL_LINE, ITEMS(WITHDRAWAL_LINE));
}

typedef int (*MakeLine)(Line *line, PyObject *const *args, PyObject **slot);

/* Set while a line is made. A line asked for meanwhile (by Python code the first one ran: a
 * caller's key's __eq__, the jsonb text of a list, or another thread then) is declined, so that
 * however a caller's objects recurse, the C stack holds at most two lines. */
static int making;

/* The line `make` makes of `args`: its str, None where declined, NULL with an error set. */
static PyObject *line_of(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t arity,
                         MakeLine make, int slots)
{
    if (nargs != arity) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, arity, nargs);
        return NULL;
    }
    if (making)
        Py_RETURN_NONE;
    PyObject *slot[TRANSACTION_SLOTS] = {NULL};  /* the most any line has: */
    _Static_assert((int)BLOCK_SLOTS <= (int)TRANSACTION_SLOTS && (int)LOG_SLOTS <= (int)TRANSACTION_SLOTS
                   && (int)WITHDRAWAL_SLOTS <= (int)TRANSACTION_SLOTS, "a line with more slots than a transaction's");
    Line line;
    line_init(&line);
    making = 1;
    int r = make(&line, args, slot);
    making = 0;
    PyObject *result = r == OK ? line_str(&line) : r == DECLINE ? Py_NewRef(Py_None) : NULL;
    line_release(&line);
    release(slot, slots);
    return result;
}

static PyObject *block_line(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    return line_of("block_line", args, nargs, 4, make_block_line, BLOCK_SLOTS);
}

static PyObject *transaction_line(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    return line_of("transaction_line", args, nargs, 5, make_transaction_line, TRANSACTION_SLOTS);
}

static PyObject *log_line(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    return line_of("log_line", args, nargs, 6, make_log_line, LOG_SLOTS);
}

static PyObject *withdrawal_line(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    return line_of("withdrawal_line", args, nargs, 3, make_withdrawal_line, WITHDRAWAL_SLOTS);
}

static PyObject *configure(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *block, *transaction, *receipt, *log, *withdrawal, *json;
    if (!PyArg_ParseTuple(args, "OOOOOO:configure", &block, &transaction, &receipt, &log, &withdrawal, &json))
        return NULL;
    if (!PyCallable_Check(json)) {
        PyErr_SetString(PyExc_TypeError, "configure: json is rows._json, a function");
        return NULL;
    }
    /* One after another, stopping at the first that fails: none runs with an exception set. */
    PyObject *maps[5] = {NULL};
    if (!(maps[0] = map_of(block, BLOCK_NAMES, ITEMS(BLOCK_NAMES), B_hash))
            || !(maps[1] = map_of(transaction, TRANSACTION_NAMES, ITEMS(TRANSACTION_NAMES), T_hash))
            || !(maps[2] = map_of(receipt, RECEIPT_NAMES, ITEMS(RECEIPT_NAMES), R_transactionHash))
            || !(maps[3] = map_of(log, LOG_NAMES, ITEMS(LOG_NAMES), L_logIndex))
            || !(maps[4] = map_of(withdrawal, WITHDRAWAL_NAMES, ITEMS(WITHDRAWAL_NAMES), W_index))) {
        for (int i = 0; i < 5; i++)
            Py_XDECREF(maps[i]);
        return NULL;
    }
    keys_set(&BLOCK_KEYS, maps[0]);
    keys_set(&TRANSACTION_KEYS, maps[1]);
    keys_set(&RECEIPT_KEYS, maps[2]);
    keys_set(&LOG_KEYS, maps[3]);
    keys_set(&WITHDRAWAL_KEYS, maps[4]);
    Py_XSETREF(JSON, Py_NewRef(json));
    Py_RETURN_NONE;
}

static PyMethodDef METHODS[] = {
    {"block_line", (PyCFunction)(void (*)(void))block_line, METH_FASTCALL,
     "block_line(block, number, transaction_count, log_count) -> str | None: rows.block_line's line, or None "
     "where rows.py is to make it."},
    {"transaction_line", (PyCFunction)(void (*)(void))transaction_line, METH_FASTCALL,
     "transaction_line(tx, receipt, block, number, index) -> str | None: rows.transaction_line's line, or None."},
    {"log_line", (PyCFunction)(void (*)(void))log_line, METH_FASTCALL,
     "log_line(entry, receipt, block, number, index, tx_hash_field) -> str | None: rows.log_line's line, or None."},
    {"withdrawal_line", (PyCFunction)(void (*)(void))withdrawal_line, METH_FASTCALL,
     "withdrawal_line(withdrawal, number, position) -> str | None: rows.withdrawal_line's line, or None."},
    {"configure", configure, METH_VARARGS,
     "configure(block_known, transaction_known, receipt_known, log_known, withdrawal_known, json): rows.py's "
     "known keys of each dict (a dict with any other key is declined: its extra is Python's) and its _json; "
     "every line is declined before."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_native_rows", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

#define INTERN(name, text) if ((name = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC PyInit__native_rows(void)
{
    init_nibbles();
    init_pairs();
    INTERN(K_hash, "hash");
    INTERN(K_number, "number");
    INTERN(K_timestamp, "timestamp");
    INTERN(K_transactionHash, "transactionHash");
    INTERN(K_transactionIndex, "transactionIndex");
    INTERN(DEFAULT_TYPE, "0x0");
    return PyModule_Create(&MODULE);
}
