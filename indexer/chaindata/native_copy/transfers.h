/* Token transfers decoded from the transfer logs as token_transfers.TRANSFER_LOGS hands them over
 * (one bytea of every log's record, below), into token_transfers' rows as one binary COPY: the
 * shapes of token_transfers.DECODE_FIXED, told apart and decoded the same way, every log counted
 * by the same names. A log it cannot read as DECODE_FIXED would (a topic other than 32 bytes, an
 * address or transaction hash over 32) declines the whole call, and the caller runs DECODE_FIXED
 * instead. Part of _native_copy.c, after its writers.
 *
 * A log's record, as TRANSFER_LOGS makes it (integers big-endian): its block number (8 bytes),
 * its index (4), its event (1 byte: 1 Transfer, 2 TransferSingle, 3 TransferBatch), then its
 * transaction hash, address, topic1, topic2, topic3 and data, each as its length in bytes (4;
 * -1 for NULL) and its first 32 bytes, the data's whole where its length is 0, 32, 64 or 96 and
 * none of it otherwise (no shape reads such data here). */

#ifndef NATIVE_COPY_TRANSFERS_H
#define NATIVE_COPY_TRANSFERS_H

#include "../native_shared/buffer.h"

#define TRANSFER_FIELDS 10  /* token_transfers.COPY_TRANSFERS' columns */

typedef struct {
    const uint8_t *at;
    Py_ssize_t len;  /* -1: NULL */
} Field;

/* A log's record, read: its block number and index where the record holds them (8 and 4 bytes),
 * its event, and its fields. */
typedef struct {
    const uint8_t *number, *index;
    int event;
    Field hash, address, topic1, topic2, topic3, data;
} Log;

static int64_t read_int(const uint8_t *at, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | at[i];
    return bytes == 4 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
}

static const uint8_t ZERO_PADDING[12] = {0};

/* An address's word as the ABI pads it: its first 12 bytes zero (a NULL topic is not, as in SQL,
 * where the comparison is NULL and the CASE goes on to its ELSE). */
static int padded(Field word)
{
    return word.len >= 12 && memcmp(word.at, ZERO_PADDING, 12) == 0;
}

static void put_bytes(Out *out, const uint8_t *at, Py_ssize_t n)
{
    put32(out, n);
    memcpy(out->at, at, (size_t)n);
    out->at += n;
}

/* The last 20 bytes of a 32-byte word, where the ABI puts an address. */
static void put_address(Out *out, Field word)
{
    put_bytes(out, word.at + 12, 20);
}

/* A 32-byte big-endian word as numeric(78,0), as abi_uint256() makes it: base-10,000 digits, most
 * significant first, two at a time from 8 limbs of 32 bits divided by 10^8 until nothing is left
 * (the leading zero limbs skipped, as most amounts are far below 2^256). */
static void put_uint256(Out *out, const uint8_t *word)
{
    uint32_t limbs[8];
    int top = 0;
    for (int i = 0; i < 8; i++)
        limbs[i] = (uint32_t)read_int(word + 4 * i, 4);
    while (top < 8 && limbs[top] == 0)
        top++;
    int digits[20], n = 0;  /* 2^256 has 78 decimal digits: 20 of base 10,000 */
    while (top < 8) {
        uint64_t rest = 0;
        for (int i = top; i < 8; i++) {
            uint64_t part = rest << 32 | limbs[i];  /* rest < 10^8 < 2^27: part < 2^59 */
            limbs[i] = (uint32_t)(part / 100000000);
            rest = part % 100000000;
        }
        digits[n++] = (int)(rest % 10000);
        digits[n++] = (int)(rest / 10000);
        while (top < 8 && limbs[top] == 0)
            top++;
    }
    while (n > 0 && digits[n - 1] == 0)
        n--;  /* the leading zero digits; the zero word has none at all */
    put32(out, 8 + 2 * n);
    put16(out, n), put16(out, n ? n - 1 : 0), put16(out, 0), put16(out, 0);
    for (int i = n - 1; i >= 0; i--)
        put16(out, digits[i]);
}

static void put_null_field(Out *out)
{
    put32(out, -1);
}

/* The shapes of DECODE_FIXED, by its names; the first four are decoded here. */
enum { ERC20, ERC721, UNINDEXED, ERC1155, BATCH, TRANSFER_PADDING, TRANSFER_LENGTHS, SINGLE_PADDING,
       SINGLE_LENGTHS, BATCH_TOPICS, SHAPES };
static const char *const SHAPE_NAMES[SHAPES] = {
    "erc20", "erc721", "unindexed", "erc1155", "batch", "transfer: address with non-zero padding",
    "transfer: unexpected topics/data length", "transfer single: address with non-zero padding",
    "transfer single: unexpected topics/data length", "transfer batch: unexpected topics",
};

/* The events TRANSFER_LOGS tells apart by topic0, one byte of its record. */
enum { TRANSFER_EVENT = 1, SINGLE_EVENT = 2, BATCH_EVENT = 3 };

/* A log's shape, as DECODE_FIXED's CASE says it. */
static int shape_of(const Log *log)
{
    Field topic1 = log->topic1, topic2 = log->topic2, topic3 = log->topic3, data = log->data;
    if (log->event == TRANSFER_EVENT) {
        if (topic3.len >= 0 && data.len == 0)
            return padded(topic1) && padded(topic2) ? ERC721 : TRANSFER_PADDING;
        if (topic2.len >= 0 && topic3.len < 0 && data.len == 32)
            return padded(topic1) && padded(topic2) ? ERC20 : TRANSFER_PADDING;
        if (topic1.len < 0 && data.len == 96) {
            Field d1 = {data.at, 32}, d2 = {data.at + 32, 32};
            return padded(d1) && padded(d2) ? UNINDEXED : TRANSFER_PADDING;
        }
        return TRANSFER_LENGTHS;
    }
    if (log->event == SINGLE_EVENT) {
        if (topic3.len >= 0 && data.len == 64)
            return padded(topic1) && padded(topic2) && padded(topic3) ? ERC1155 : SINGLE_PADDING;
        return SINGLE_LENGTHS;
    }
    return topic3.len >= 0 ? BATCH : BATCH_TOPICS;
}

/* Writes the token_transfers row of a log of a decoded shape (DECODE_FIXED's INSERT ... SELECT). */
static void put_transfer(Out *out, const Log *log, int shape)
{
    Field topic1 = log->topic1, topic2 = log->topic2, topic3 = log->topic3, data = log->data;
    put16(out, TRANSFER_FIELDS);
    put32(out, 8), put64(out, read_int(log->number, 8));  /* block_number */
    put32(out, 4), put32(out, read_int(log->index, 4));   /* log_index */
    put32(out, 4), put32(out, 0);                     /* position */
    if (shape == UNINDEXED)                           /* standard: the log alone cannot tell */
        put_null_field(out);
    else
        put_bytes(out, (const uint8_t *)SHAPE_NAMES[shape], (Py_ssize_t)strlen(SHAPE_NAMES[shape]));
    put_bytes(out, log->address.at, log->address.len);  /* token_address */
    if (shape == UNINDEXED) {                         /* from_address, to_address */
        put_address(out, (Field){data.at, 32}), put_address(out, (Field){data.at + 32, 32});
    } else if (shape == ERC1155) {
        put_address(out, topic2), put_address(out, topic3);
    } else {
        put_address(out, topic1), put_address(out, topic2);
    }
    if (shape == ERC721)                              /* token_id */
        put_uint256(out, topic3.at);
    else if (shape == ERC1155)
        put_uint256(out, data.at);
    else
        put_null_field(out);
    if (shape == ERC20)                               /* amount */
        put_uint256(out, data.at);
    else if (shape == ERC721) {
        put32(out, 10), put16(out, 1), put16(out, 0), put16(out, 0), put16(out, 0), put16(out, 1);
    } else if (shape == UNINDEXED)
        put_uint256(out, data.at + 64);
    else
        put_uint256(out, data.at + 32);
    put_bytes(out, log->hash.at, log->hash.len);      /* transaction_hash */
}

/* One field of a record: its length, and its bytes where the record holds them. */
static int read_field(const uint8_t **at, const uint8_t *end, Field *f, int is_data)
{
    if (end - *at < 4)
        return DECLINE;
    int64_t n = read_int(*at, 4);
    *at += 4;
    int64_t held = is_data ? (n == 0 || n == 32 || n == 64 || n == 96 ? n : 0) : (n < 0 ? 0 : n < 32 ? n : 32);
    if (n < -1 || held > end - *at)
        return DECLINE;
    f->at = *at;
    f->len = (Py_ssize_t)n;
    *at += held;
    return OK;
}

/* Reads the record at `*at` into `log`; DECLINE where it is cut short, or holds what this decoder
 * does not read as DECODE_FIXED would: a topic other than 32 bytes, an address or transaction
 * hash over 32 (their bytes are written out whole), an event other than the three. */
static int read_log(const uint8_t **at, const uint8_t *end, Log *log)
{
    if (end - *at < 13)
        return DECLINE;
    log->number = *at;
    log->index = *at + 8;
    log->event = (*at)[12];
    *at += 13;
    if (log->event < TRANSFER_EVENT || log->event > BATCH_EVENT)
        return DECLINE;
    TRY(read_field(at, end, &log->hash, 0));
    TRY(read_field(at, end, &log->address, 0));
    Field *topics[3] = {&log->topic1, &log->topic2, &log->topic3};
    for (int i = 0; i < 3; i++) {
        TRY(read_field(at, end, topics[i], 0));
        if (topics[i]->len != -1 && topics[i]->len != 32)
            return DECLINE;
    }
    TRY(read_field(at, end, &log->data, 1));
    if (log->hash.len < 0 || log->hash.len > 32 || log->address.len < 0 || log->address.len > 32
        || log->data.len < 0)
        return DECLINE;
    return OK;
}

/* Bytes a row of put_transfer takes at most beyond its token address and transaction hash. */
#define TRANSFER_ROW_MOST (2 + 4 + 8 + 4 + 4 + 4 + 4 + 4 + 7 + 4 + 4 + 20 + 4 + 20 + 2 * (4 + 8 + 2 * 20) + 4)

enum { DECODED, NOT_READ, NO_MEMORY };

/* The rows of every record into `g`, each log's shape counted in `counts`. Runs without the GIL. */
static int decode_records(const uint8_t *at, const uint8_t *end, Buffer *g, Py_ssize_t counts[SHAPES])
{
    if (grow(g, HEADER_SIZE) < 0)
        return NO_MEMORY;
    Out out = {(char *)g->data};
    put_header(&out);
    g->len = (size_t)(out.at - (char *)g->data);
    while (at < end) {
        Log log;
        if (read_log(&at, end, &log) != OK)
            return NOT_READ;
        int shape = shape_of(&log);
        counts[shape]++;
        if (shape > ERC1155)
            continue;
        if (grow(g, TRANSFER_ROW_MOST + log.hash.len + log.address.len) < 0)
            return NO_MEMORY;
        out.at = (char *)g->data + g->len;
        put_transfer(&out, &log, shape);
        g->len = (size_t)(out.at - (char *)g->data);
    }
    if (grow(g, 2) < 0)
        return NO_MEMORY;
    out.at = (char *)g->data + g->len;
    put16(&out, -1);
    g->len += 2;
    return DECODED;
}

static PyObject *transfers(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer records;
    if (PyObject_GetBuffer(arg, &records, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL, *counts = NULL;
    Buffer g = {NULL, 0, 0};
    Py_ssize_t counted[SHAPES] = {0};
    int decoded;
    Py_BEGIN_ALLOW_THREADS
    decoded = decode_records(records.buf, (const uint8_t *)records.buf + records.len, &g, counted);
    Py_END_ALLOW_THREADS
    if (decoded == NO_MEMORY) {
        PyErr_NoMemory();
        goto done;
    }
    if (decoded == NOT_READ) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if ((counts = PyDict_New()) == NULL)
        goto done;
    for (int shape = 0; shape < SHAPES; shape++) {
        if (counted[shape] == 0)
            continue;
        PyObject *count = PyLong_FromSsize_t(counted[shape]);
        int failed = count == NULL || PyDict_SetItemString(counts, SHAPE_NAMES[shape], count) < 0;
        Py_XDECREF(count);
        if (failed)
            goto done;
    }
    result = Py_BuildValue("(y#O)", (const char *)g.data, (Py_ssize_t)g.len, counts);
done:
    PyMem_RawFree(g.data);
    Py_XDECREF(counts);
    PyBuffer_Release(&records);
    return result;
}

#endif
