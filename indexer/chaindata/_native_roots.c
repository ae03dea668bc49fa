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
#include <stdint.h>
#include <string.h>

/* ---- keccak-256 (the original Keccak padding, not SHA-3's) ----------------------------------- */

#define RATE 136
#define ROTL(x, n) (((x) << (n)) | ((x) >> (64 - (n))))

static const uint64_t ROUND_CONSTANTS[24] = {
    0x0000000000000001ULL, 0x0000000000008082ULL, 0x800000000000808aULL, 0x8000000080008000ULL,
    0x000000000000808bULL, 0x0000000080000001ULL, 0x8000000080008081ULL, 0x8000000000008009ULL,
    0x000000000000008aULL, 0x0000000000000088ULL, 0x0000000080008009ULL, 0x000000008000000aULL,
    0x000000008000808bULL, 0x800000000000008bULL, 0x8000000000008089ULL, 0x8000000000008003ULL,
    0x8000000000008002ULL, 0x8000000000000080ULL, 0x000000000000800aULL, 0x800000008000000aULL,
    0x8000000080008081ULL, 0x8000000000008080ULL, 0x0000000080000001ULL, 0x8000000080008008ULL,
};

/* Keccak-f[1600] with the 25 lanes in locals, each round written out (theta, rho and pi, chi,
 * iota): gcc keeps most lanes in registers. */
static void keccak_f(uint64_t *s)
{
    uint64_t a00 = s[0], a01 = s[1], a02 = s[2], a03 = s[3], a04 = s[4];
    uint64_t a05 = s[5], a06 = s[6], a07 = s[7], a08 = s[8], a09 = s[9];
    uint64_t a10 = s[10], a11 = s[11], a12 = s[12], a13 = s[13], a14 = s[14];
    uint64_t a15 = s[15], a16 = s[16], a17 = s[17], a18 = s[18], a19 = s[19];
    uint64_t a20 = s[20], a21 = s[21], a22 = s[22], a23 = s[23], a24 = s[24];
    for (int round = 0; round < 24; round++) {
        uint64_t c0 = a00 ^ a05 ^ a10 ^ a15 ^ a20;
        uint64_t c1 = a01 ^ a06 ^ a11 ^ a16 ^ a21;
        uint64_t c2 = a02 ^ a07 ^ a12 ^ a17 ^ a22;
        uint64_t c3 = a03 ^ a08 ^ a13 ^ a18 ^ a23;
        uint64_t c4 = a04 ^ a09 ^ a14 ^ a19 ^ a24;
        uint64_t d0 = c4 ^ ROTL(c1, 1), d1 = c0 ^ ROTL(c2, 1), d2 = c1 ^ ROTL(c3, 1);
        uint64_t d3 = c2 ^ ROTL(c4, 1), d4 = c3 ^ ROTL(c0, 1);
        /* b[y][2x+3y] = rot(a[x][y] ^ d[x], r[x][y]), lane index x + 5y */
        uint64_t b00 = a00 ^ d0;
        uint64_t b10 = ROTL(a01 ^ d1, 1);
        uint64_t b20 = ROTL(a02 ^ d2, 62);
        uint64_t b05 = ROTL(a03 ^ d3, 28);
        uint64_t b15 = ROTL(a04 ^ d4, 27);
        uint64_t b16 = ROTL(a05 ^ d0, 36);
        uint64_t b01 = ROTL(a06 ^ d1, 44);
        uint64_t b11 = ROTL(a07 ^ d2, 6);
        uint64_t b21 = ROTL(a08 ^ d3, 55);
        uint64_t b06 = ROTL(a09 ^ d4, 20);
        uint64_t b07 = ROTL(a10 ^ d0, 3);
        uint64_t b17 = ROTL(a11 ^ d1, 10);
        uint64_t b02 = ROTL(a12 ^ d2, 43);
        uint64_t b12 = ROTL(a13 ^ d3, 25);
        uint64_t b22 = ROTL(a14 ^ d4, 39);
        uint64_t b23 = ROTL(a15 ^ d0, 41);
        uint64_t b08 = ROTL(a16 ^ d1, 45);
        uint64_t b18 = ROTL(a17 ^ d2, 15);
        uint64_t b03 = ROTL(a18 ^ d3, 21);
        uint64_t b13 = ROTL(a19 ^ d4, 8);
        uint64_t b14 = ROTL(a20 ^ d0, 18);
        uint64_t b24 = ROTL(a21 ^ d1, 2);
        uint64_t b09 = ROTL(a22 ^ d2, 61);
        uint64_t b19 = ROTL(a23 ^ d3, 56);
        uint64_t b04 = ROTL(a24 ^ d4, 14);
        a00 = b00 ^ (~b01 & b02) ^ ROUND_CONSTANTS[round];
        a01 = b01 ^ (~b02 & b03);
        a02 = b02 ^ (~b03 & b04);
        a03 = b03 ^ (~b04 & b00);
        a04 = b04 ^ (~b00 & b01);
        a05 = b05 ^ (~b06 & b07);
        a06 = b06 ^ (~b07 & b08);
        a07 = b07 ^ (~b08 & b09);
        a08 = b08 ^ (~b09 & b05);
        a09 = b09 ^ (~b05 & b06);
        a10 = b10 ^ (~b11 & b12);
        a11 = b11 ^ (~b12 & b13);
        a12 = b12 ^ (~b13 & b14);
        a13 = b13 ^ (~b14 & b10);
        a14 = b14 ^ (~b10 & b11);
        a15 = b15 ^ (~b16 & b17);
        a16 = b16 ^ (~b17 & b18);
        a17 = b17 ^ (~b18 & b19);
        a18 = b18 ^ (~b19 & b15);
        a19 = b19 ^ (~b15 & b16);
        a20 = b20 ^ (~b21 & b22);
        a21 = b21 ^ (~b22 & b23);
        a22 = b22 ^ (~b23 & b24);
        a23 = b23 ^ (~b24 & b20);
        a24 = b24 ^ (~b20 & b21);
    }
    s[0] = a00; s[1] = a01; s[2] = a02; s[3] = a03; s[4] = a04;
    s[5] = a05; s[6] = a06; s[7] = a07; s[8] = a08; s[9] = a09;
    s[10] = a10; s[11] = a11; s[12] = a12; s[13] = a13; s[14] = a14;
    s[15] = a15; s[16] = a16; s[17] = a17; s[18] = a18; s[19] = a19;
    s[20] = a20; s[21] = a21; s[22] = a22; s[23] = a23; s[24] = a24;
}

static inline uint64_t load64(const uint8_t *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24
        | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

typedef struct {
    uint64_t state[25];
    uint8_t pending[RATE];
    size_t npending;
} Keccak;

static void keccak_init(Keccak *k)
{
    memset(k, 0, sizeof *k);
}

static void absorb_block(Keccak *k, const uint8_t *block)
{
    for (int i = 0; i < RATE / 8; i++)
        k->state[i] ^= load64(block + 8 * i);
    keccak_f(k->state);
}

static void keccak_update(Keccak *k, const uint8_t *data, size_t n)
{
    if (n == 0)
        return;
    if (k->npending) {
        size_t take = RATE - k->npending < n ? RATE - k->npending : n;
        memcpy(k->pending + k->npending, data, take);
        k->npending += take;
        data += take;
        n -= take;
        if (k->npending < RATE)
            return;
        absorb_block(k, k->pending);
        k->npending = 0;
    }
    for (; n >= RATE; data += RATE, n -= RATE)
        absorb_block(k, data);
    memcpy(k->pending, data, n);
    k->npending = n;
}

static void keccak_final(Keccak *k, uint8_t out[32])
{
    memset(k->pending + k->npending, 0, RATE - k->npending);
    k->pending[k->npending] ^= 0x01;
    k->pending[RATE - 1] ^= 0x80;
    absorb_block(k, k->pending);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            out[8 * i + j] = (uint8_t)(k->state[i] >> (8 * j));
}

static void keccak256(const uint8_t *data, size_t n, uint8_t out[32])
{
    Keccak k;
    keccak_init(&k);
    keccak_update(&k, data, n);
    keccak_final(&k, out);
}

/* ---- a growing byte buffer, and RLP into it --------------------------------------------------- */

typedef struct {
    uint8_t *data;
    size_t len, cap;
} Buffer;

static int reserve(Buffer *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    if (more > PY_SSIZE_T_MAX / 2 - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
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

/* ---- hex digits from the JSON ---------------------------------------------------------------- */

/* What the reading of one value answers: written, or not readable here (the Python check then
 * decides), or a Python error (out of memory). */
#define OK 1
#define DECLINE 0
#define ERROR (-1)

static int8_t NIBBLE[256];

static void init_nibbles(void)
{
    memset(NIBBLE, -1, sizeof NIBBLE);
    for (int i = 0; i < 10; i++)
        NIBBLE['0' + i] = (int8_t)i;
    for (int i = 0; i < 6; i++)
        NIBBLE['a' + i] = NIBBLE['A' + i] = (int8_t)(10 + i);
}

/* `n` hex digits (n even) into bytes; 0 if one is not a hex digit. */
static int unhex(uint8_t *out, const char *digits, size_t n)
{
    for (size_t i = 0; i < n; i += 2) {
        int hi = NIBBLE[(uint8_t)digits[i]], lo = NIBBLE[(uint8_t)digits[i + 1]];
        if ((hi | lo) < 0)
            return 0;
        *out++ = (uint8_t)(hi << 4 | lo);
    }
    return 1;
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

static int has_hex_prefix(const char *s, Py_ssize_t n)
{
    return n >= 2 && s[0] == '0' && s[1] == 'x';
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

/* ---- transactions, receipts, withdrawals ------------------------------------------------------ */

static PyObject *K_type, *K_nonce, *K_gas, *K_gasPrice, *K_maxFeePerGas, *K_maxPriorityFeePerGas,
    *K_maxFeePerBlobGas, *K_to, *K_value, *K_input, *K_data, *K_v, *K_r, *K_s, *K_yParity, *K_chainId,
    *K_accessList, *K_address, *K_storageKeys, *K_blobVersionedHashes, *K_authorizationList, *K_sourceHash,
    *K_from, *K_mint, *K_isSystemTx, *K_root, *K_status, *K_cumulativeGasUsed, *K_logs, *K_logsBloom,
    *K_topics, *K_depositNonce, *K_depositReceiptVersion, *K_index, *K_validatorIndex, *K_amount,
    *K_number, *K_transactions, *K_transactionsRoot, *K_receiptsRoot, *K_withdrawalsRoot, *K_withdrawals;

#define TRY(call) do { int r_ = (call); if (r_ != OK) return r_; } while (0)

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
    PyObject *list = PyDict_GetItemWithError(tx, K_authorizationList);
    if (list == NULL)
        return PyErr_Occurred() ? ERROR : DECLINE;
    if (!PyList_Check(list))
        return DECLINE;
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

static const char ZERO_HASH_HEX[] = "0x0000000000000000000000000000000000000000000000000000000000000000";

/* The three bits of the 2048-bit logs bloom that an address or topic sets. */
static void add_to_bloom(uint8_t bloom[256], const uint8_t *item, size_t n)
{
    uint8_t h[32];
    keccak256(item, n, h);
    for (int i = 0; i < 6; i += 2) {
        unsigned bit = ((unsigned)h[i] << 8 | h[i + 1]) & 2047;
        bloom[255 - bit / 8] |= (uint8_t)(1u << (bit % 8));
    }
}

typedef struct {
    int compute;  /* whether the bloom is made from the logs */
    uint8_t made[256];
} Bloom;

/* A log: [address, [topic, ...], data], its address and topics added to the bloom made. */
static int put_log(Buffer *b, PyObject *entry, void *context)
{
    Bloom *bloom = context;
    if (!PyDict_Check(entry))
        return DECLINE;
    size_t start = b->len;
    const char *address;
    Py_ssize_t address_n;
    TRY(get_str(entry, K_address, &address, &address_n, NULL));
    TRY(put_data_str(b, address, address_n));
    if (bloom->compute)
        add_to_bloom(bloom->made, b->data + b->len - (address_n - 2) / 2, (size_t)(address_n - 2) / 2);
    PyObject *topics = PyDict_GetItemWithError(entry, K_topics);
    if (topics == NULL)
        return PyErr_Occurred() ? ERROR : DECLINE;
    if (!PyList_Check(topics))
        return DECLINE;
    size_t topics_start = b->len;
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(topics); t++) {  /* no Python code runs in this loop */
        PyObject *topic = PyList_GET_ITEM(topics, t);
        if (!PyUnicode_Check(topic) || !PyUnicode_IS_ASCII(topic))
            return DECLINE;
        Py_ssize_t topic_n = PyUnicode_GET_LENGTH(topic);
        TRY(put_data_str(b, (const char *)PyUnicode_DATA(topic), topic_n));
        if (bloom->compute)
            add_to_bloom(bloom->made, b->data + b->len - (topic_n - 2) / 2, (size_t)(topic_n - 2) / 2);
    }
    if (end_list(b, topics_start) < 0)
        return ERROR;
    TRY(put_data(b, entry, K_data));
    return end_list(b, start) < 0 ? ERROR : OK;
}

/* A receipt as the receipts trie holds it; `tx_type` stands in for a type the node does not
 * send; with `recompute` the bloom is made from the logs (and one sent must equal it). */
static int put_receipt(Buffer *b, PyObject *receipt, long tx_type, int recompute)
{
    if (!PyDict_Check(receipt))
        return DECLINE;
    long kind;
    int missing;
    int r = small_quantity(receipt, K_type, &kind, &missing, 4);
    if (r == DECLINE && missing)
        kind = tx_type;
    else if (r != OK)
        return r;
    if (kind > 0xff)
        return DECLINE;
    if (kind != 0)
        TRY(put_byte(b, (uint8_t)kind) < 0 ? ERROR : OK);
    size_t start = b->len;
    /* The outcome: the state root before Byzantium, the status since (roots.outcome_json). */
    const char *outcome, *s;
    Py_ssize_t n, status_n;
    int root_missing;
    r = get_str(receipt, K_root, &s, &n, &root_missing);
    if (r == ERROR || (r == DECLINE && !root_missing))
        return r;  /* a root that is not a string: the Python check words it */
    if (r == OK && n == 66 && memcmp(s, ZERO_HASH_HEX, 66) != 0) {
        outcome = s;
    } else {
        int status_missing;
        r = get_str(receipt, K_status, &s, &status_n, &status_missing);
        if (r != OK)
            return r;
        outcome = s;
        n = status_n;
    }
    if (n == 66)
        TRY(put_data_str(b, outcome, n));
    else
        TRY(put_quantity_str(b, outcome, n));
    TRY(put_quantity(b, receipt, K_cumulativeGasUsed));
    /* The bloom the node sent, read now: the next lookup could free its string. */
    const char *sent_hex;
    Py_ssize_t sent_n;
    int not_sent;
    uint8_t sent[256];
    static const uint8_t zero_bloom[256];
    r = get_str(receipt, K_logsBloom, &sent_hex, &sent_n, &not_sent);
    if (r == ERROR || (r == DECLINE && !not_sent))
        return r;  /* a bloom that is not a string: the Python check words it */
    int have_bloom = r == OK;
    if (have_bloom && (sent_n != 514 || !has_hex_prefix(sent_hex, sent_n) || !unhex(sent, sent_hex + 2, 512)))
        return DECLINE;
    PyObject *logs = PyDict_GetItemWithError(receipt, K_logs);
    if (logs == NULL)
        return PyErr_Occurred() ? ERROR : DECLINE;
    if (!PyList_Check(logs))
        return DECLINE;
    if (PyList_GET_SIZE(logs) == 0) {
        /* No log: the zero bloom, and the node must have sent that one (or none). */
        if (have_bloom && memcmp(sent, zero_bloom, 256) != 0)
            return DECLINE;
        TRY(reserve(b, 260) < 0 ? ERROR : OK);
        b->data[b->len++] = 0xb9;
        b->data[b->len++] = 0x01;
        b->data[b->len++] = 0x00;
        memset(b->data + b->len, 0, 256);
        b->len += 256;
        b->data[b->len++] = 0xc0;
    } else {
        /* The bloom: the node's own, which the root commits to, or with `recompute` (and where
         * the node sent none) the one its logs make, which a bloom it sent must equal. */
        Bloom bloom;
        bloom.compute = recompute || !have_bloom;
        memset(bloom.made, 0, 256);
        TRY(reserve(b, 259) < 0 ? ERROR : OK);
        size_t bloom_at = b->len + 3;
        b->data[b->len++] = 0xb9;
        b->data[b->len++] = 0x01;
        b->data[b->len++] = 0x00;
        memcpy(b->data + b->len, have_bloom ? sent : zero_bloom, 256);
        b->len += 256;
        size_t logs_start = b->len;
        TRY(put_each(b, logs, put_log, &bloom));
        if (end_list(b, logs_start) < 0)
            return ERROR;
        if (bloom.compute) {
            if (have_bloom && memcmp(bloom.made, sent, 256) != 0)
                return DECLINE;  /* a bloom unlike its logs: the Python check words the mismatch */
            memcpy(b->data + bloom_at, bloom.made, 256);
        }
    }
    if (kind == 0x7e) {  /* as encodings.encode_receipt: the nonce only with a version (Canyon) */
        PyObject *nonce = PyDict_GetItemWithError(receipt, K_depositNonce);
        if (nonce == NULL && PyErr_Occurred())
            return ERROR;
        PyObject *version = PyDict_GetItemWithError(receipt, K_depositReceiptVersion);
        if (version == NULL && PyErr_Occurred())
            return ERROR;
        if (nonce != NULL && nonce != Py_None && version != NULL && version != Py_None) {
            TRY(put_quantity(b, receipt, K_depositNonce));
            TRY(put_quantity(b, receipt, K_depositReceiptVersion));
        }
    }
    return end_list(b, start) < 0 ? ERROR : OK;
}

static int put_withdrawal(Buffer *b, PyObject *w)
{
    if (!PyDict_Check(w))
        return DECLINE;
    size_t start = b->len;
    TRY(put_quantity(b, w, K_index));
    TRY(put_quantity(b, w, K_validatorIndex));
    TRY(put_data(b, w, K_address));
    TRY(put_quantity(b, w, K_amount));
    return end_list(b, start) < 0 ? ERROR : OK;
}

/* ---- the ordered trie: key rlp(i), value the i-th encoding ------------------------------------ */

typedef struct {
    uint8_t key[18];  /* the key's nibbles */
    uint8_t key_len;
    const uint8_t *value;
    size_t value_len;
} Item;

/* How a parent holds a node: its encoding when under 32 bytes, else 0xa0 and its hash. */
typedef struct {
    uint8_t data[33];
    uint8_t len;
} Ref;

static void hold(Ref *ref, const uint8_t *encoding, size_t n)
{
    if (n < 32) {
        memcpy(ref->data, encoding, n);
        ref->len = (uint8_t)n;
    } else {
        ref->data[0] = 0xa0;
        keccak256(encoding, n, ref->data + 1);
        ref->len = 33;
    }
}

/* rlp(hex-prefix encoding of nibbles); returns its length (at most 1 + 1 + 9). */
static size_t compact_path(uint8_t *out, const uint8_t *nibbles, size_t n, int leaf)
{
    uint8_t packed[10];
    size_t size = 0;
    if (n & 1) {
        packed[size++] = (uint8_t)((leaf ? 0x30 : 0x10) | nibbles[0]);
        nibbles++, n--;
    } else {
        packed[size++] = leaf ? 0x20 : 0x00;
    }
    for (size_t i = 0; i < n; i += 2)
        packed[size++] = (uint8_t)(nibbles[i] << 4 | nibbles[i + 1]);
    if (size == 1 && packed[0] < 0x80) {
        out[0] = packed[0];
        return 1;
    }
    out[0] = (uint8_t)(0x80 + size);
    memcpy(out + 1, packed, size);
    return size + 1;
}

static int node(Ref *ref, const Item *items, size_t count, size_t depth)
{
    if (count == 1) {
        uint8_t path[12], value_prefix[9], list_prefix[9];
        size_t path_len = compact_path(path, items->key + depth, items->key_len - depth, 1);
        size_t value_prefix_len = 0;
        if (!(items->value_len == 1 && items->value[0] < 0x80))
            value_prefix_len = rlp_prefix(value_prefix, items->value_len, 0x80);
        size_t payload = path_len + value_prefix_len + items->value_len;
        size_t list_prefix_len = rlp_prefix(list_prefix, payload, 0xc0);
        if (list_prefix_len + payload < 32) {
            uint8_t *p = ref->data;
            memcpy(p, list_prefix, list_prefix_len), p += list_prefix_len;
            memcpy(p, path, path_len), p += path_len;
            memcpy(p, value_prefix, value_prefix_len), p += value_prefix_len;
            if (items->value_len)
                memcpy(p, items->value, items->value_len);
            ref->len = (uint8_t)(list_prefix_len + payload);
            return 0;
        }
        Keccak k;
        keccak_init(&k);
        keccak_update(&k, list_prefix, list_prefix_len);
        keccak_update(&k, path, path_len);
        keccak_update(&k, value_prefix, value_prefix_len);
        keccak_update(&k, items->value, items->value_len);
        ref->data[0] = 0xa0;
        keccak_final(&k, ref->data + 1);
        ref->len = 33;
        return 0;
    }
    const Item *first = items, *last = items + count - 1;
    size_t shared = depth;
    while (first->key[shared] == last->key[shared])
        shared++;
    uint8_t encoding[9 + 17 * 33];
    size_t n = 9;  /* the payload starts after room for the list's prefix */
    if (shared > depth) {
        Ref child;
        n += compact_path(encoding + n, first->key + depth, shared - depth, 0);
        if (node(&child, items, count, shared) < 0)
            return -1;
        memcpy(encoding + n, child.data, child.len);
        n += child.len;
    } else {
        size_t start = 0;
        for (int nibble = 0; nibble < 16; nibble++) {
            size_t end = start;
            while (end < count && items[end].key[depth] == nibble)
                end++;
            if (end == start) {
                encoding[n++] = 0x80;
                continue;
            }
            Ref child;
            if (node(&child, items + start, end - start, depth + 1) < 0)
                return -1;
            memcpy(encoding + n, child.data, child.len);
            n += child.len;
            start = end;
        }
        encoding[n++] = 0x80;  /* no value in a branch: rlp(i) is a prefix-free code */
    }
    uint8_t prefix[9];
    size_t prefix_len = rlp_prefix(prefix, n - 9, 0xc0);
    memcpy(encoding + 9 - prefix_len, prefix, prefix_len);
    hold(ref, encoding + 9 - prefix_len, n - 9 + prefix_len);
    return 0;
}

static const uint8_t EMPTY_ROOT[32] = {
    0x56, 0xe8, 0x1f, 0x17, 0x1b, 0xcc, 0x55, 0xa6, 0xff, 0x83, 0x45, 0xe6, 0x92, 0xc0, 0xf8, 0x6e,
    0x5b, 0x48, 0xe0, 0x1b, 0x99, 0x6c, 0xad, 0xc0, 0x01, 0x62, 0x2f, 0xb5, 0xe3, 0x63, 0xb4, 0x21,
};

/* The root of the trie of `count` encodings whose ends are `ends[i]` in `values`. */
static int trie_root(uint8_t root[32], const uint8_t *values, const size_t *ends, size_t count)
{
    if (count == 0) {
        memcpy(root, EMPTY_ROOT, 32);
        return 0;
    }
    Item *items = PyMem_Malloc(count * sizeof(Item));
    if (items == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* Keys in byte order: rlp(1)..rlp(127) are the bytes 0x01..0x7f, then rlp(0) = 0x80, then
     * rlp(128..255) = 0x81xx, rlp(256..65535) = 0x82xxxx, ... */
    size_t low = count < 128 ? count : 128;
    for (size_t slot = 0; slot < count; slot++) {
        size_t i = slot + 1 < low ? slot + 1 : slot + 1 == low ? 0 : slot;
        uint8_t key[9];
        size_t key_len;
        if (i == 0) {
            key[0] = 0x80, key_len = 1;
        } else if (i < 128) {
            key[0] = (uint8_t)i, key_len = 1;
        } else {
            size_t size = 0;
            for (size_t m = i; m; m >>= 8)
                size++;
            key[0] = (uint8_t)(0x80 + size);
            for (size_t j = 0; j < size; j++)
                key[size - j] = (uint8_t)(i >> (8 * j));
            key_len = size + 1;
        }
        Item *item = &items[slot];
        for (size_t j = 0; j < key_len; j++) {
            item->key[2 * j] = key[j] >> 4;
            item->key[2 * j + 1] = key[j] & 15;
        }
        item->key_len = (uint8_t)(2 * key_len);
        size_t begin = i ? ends[i - 1] : 0;
        item->value = values + begin;
        item->value_len = ends[i] - begin;
    }
    Ref ref;
    int failed = node(&ref, items, count, 0);
    PyMem_Free(items);
    if (failed)
        return -1;
    if (ref.len == 33)
        memcpy(root, ref.data + 1, 32);
    else
        keccak256(ref.data, ref.len, root);  /* the root is hashed even when under 32 bytes */
    return 0;
}

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
    PyMem_Free(e->buffer.data);
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
 * and each item held while read (see put_each). `types`, where given, gets each transaction's
 * type for the receipts that send none. */
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
    PyObject *txs = PyDict_GetItemWithError(block, K_transactions);
    if (txs == NULL)
        return PyErr_Occurred() ? ERROR : DECLINE;
    if (!PyList_Check(txs))
        return DECLINE;
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
    PyMem_Free(b->data);
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

static PyObject *keccak(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint8_t out[32];
    Py_BEGIN_ALLOW_THREADS
    keccak256(view.buf, (size_t)view.len, out);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)out, 32);
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
    {"keccak", keccak, METH_O, "keccak(data) -> bytes: keccak-256."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_native_roots", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

#define KEY(name) if ((K_##name = PyUnicode_InternFromString(#name)) == NULL) return NULL

PyMODINIT_FUNC PyInit__native_roots(void)
{
    init_nibbles();
    KEY(type); KEY(nonce); KEY(gas); KEY(gasPrice); KEY(maxFeePerGas); KEY(maxPriorityFeePerGas);
    KEY(maxFeePerBlobGas); KEY(to); KEY(value); KEY(input); KEY(data); KEY(v); KEY(r); KEY(s); KEY(yParity);
    KEY(chainId); KEY(accessList); KEY(address); KEY(storageKeys); KEY(blobVersionedHashes);
    KEY(authorizationList); KEY(sourceHash); KEY(from); KEY(mint); KEY(isSystemTx); KEY(root); KEY(status);
    KEY(cumulativeGasUsed); KEY(logs); KEY(logsBloom); KEY(topics); KEY(depositNonce);
    KEY(depositReceiptVersion); KEY(index); KEY(validatorIndex); KEY(amount); KEY(number); KEY(transactions);
    KEY(transactionsRoot); KEY(receiptsRoot); KEY(withdrawalsRoot); KEY(withdrawals);
    return PyModule_Create(&MODULE);
}
