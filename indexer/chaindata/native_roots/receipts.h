/* A receipt (with its logs and bloom) and a withdrawal as their tries hold them, from the node's
 * JSON, as json_encodings.py makes them. Part of _native_roots.c. */

#ifndef NATIVE_ROOTS_RECEIPTS_H
#define NATIVE_ROOTS_RECEIPTS_H

#include "keccak_many.h"
#include "keys.h"
#include "rlp.h"

static const char ZERO_HASH_HEX[] = "0x0000000000000000000000000000000000000000000000000000000000000000";

#define BLOOM_BATCH 64

/* A receipt's logs bloom made from its logs: each address and topic is copied (the buffer's
 * lists move their payloads when their prefixes are put in front) and held until BLOOM_BATCH of
 * them are hashed at once (keccak_many.h). */
typedef struct {
    int compute;  /* whether the bloom is made from the logs */
    uint8_t made[256];
    uint8_t item[BLOOM_BATCH][32];
    uint8_t len[BLOOM_BATCH];
    int held;
} Bloom;

static void set_bits(Bloom *bloom, const uint8_t hash[32])
{
    for (int j = 0; j < 6; j += 2) {
        unsigned bit = ((unsigned)hash[j] << 8 | hash[j + 1]) & 2047;
        bloom->made[255 - bit / 8] |= (uint8_t)(1u << (bit % 8));
    }
}

/* The three bits of the 2048-bit bloom that each held item sets. */
static void add_held(Bloom *bloom)
{
    Message messages[BLOOM_BATCH];
    uint8_t hashes[BLOOM_BATCH][32];
    for (int i = 0; i < bloom->held; i++)
        messages[i] = (Message){NULL, 0, bloom->item[i], bloom->len[i], hashes[i]};
    keccak_many(messages, (size_t)bloom->held);
    for (int i = 0; i < bloom->held; i++)
        set_bits(bloom, hashes[i]);
    bloom->held = 0;
}

/* The item of `n` bytes just put at the buffer's end; one longer than a topic, which no node
 * sends, hashed at once. */
static void add_to_bloom(Bloom *bloom, const Buffer *b, size_t n)
{
    if (n > 32) {
        uint8_t hash[32];
        keccak256(b->data + b->len - n, n, hash);
        set_bits(bloom, hash);
        return;
    }
    memcpy(bloom->item[bloom->held], b->data + b->len - n, n);
    bloom->len[bloom->held] = (uint8_t)n;
    if (++bloom->held == BLOOM_BATCH)
        add_held(bloom);
}

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
        add_to_bloom(bloom, b, (size_t)(address_n - 2) / 2);
    PyObject *topics;
    TRY(get_list(entry, K_topics, &topics));
    size_t topics_start = b->len;
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(topics); t++) {  /* no Python code runs in this loop */
        PyObject *topic = PyList_GET_ITEM(topics, t);
        if (!PyUnicode_Check(topic) || !PyUnicode_IS_ASCII(topic))
            return DECLINE;
        Py_ssize_t topic_n = PyUnicode_GET_LENGTH(topic);
        TRY(put_data_str(b, (const char *)PyUnicode_DATA(topic), topic_n));
        if (bloom->compute)
            add_to_bloom(bloom, b, (size_t)(topic_n - 2) / 2);
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
    const char *outcome;
    Py_ssize_t n;
    int root_missing;
    r = get_str(receipt, K_root, &outcome, &n, &root_missing);
    if (r == ERROR || (r == DECLINE && !root_missing))
        return r;  /* a root that is not a string: the Python check words it */
    if (r != OK || n != 66 || memcmp(outcome, ZERO_HASH_HEX, 66) == 0)
        TRY(get_str(receipt, K_status, &outcome, &n, NULL));
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
    PyObject *logs;
    TRY(get_list(receipt, K_logs, &logs));
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
        bloom.held = 0;
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
            add_held(&bloom);
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

#endif
