/* The root of an ordered trie (key rlp(i), value the i-th encoding), as ordered_trie.py
 * computes it. Part of _native_roots.c. */

#ifndef NATIVE_ROOTS_TRIE_H
#define NATIVE_ROOTS_TRIE_H

#include <Python.h>
#include "keccak.h"
#include "keccak_many.h"

/* How a parent holds a node: its encoding when under 32 bytes, else 0xa0 and its hash. */
typedef struct {
    uint8_t data[33];
    uint8_t len;
} Ref;

typedef struct {
    uint8_t key[18];  /* the key's nibbles */
    uint8_t key_len;
    uint8_t depth;  /* where the item is a leaf */
    const uint8_t *value;
    size_t value_len;
    uint8_t head[30];  /* the leaf's list prefix, path and value prefix */
    uint8_t head_len;
    Ref leaf;
} Item;

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

/* The depth at which each item is a leaf: node()'s walk, with nothing encoded. */
static void find_leaves(Item *items, size_t count, size_t depth)
{
    if (count == 1) {
        items->depth = (uint8_t)depth;
        return;
    }
    const Item *first = items, *last = items + count - 1;
    size_t shared = depth;
    while (first->key[shared] == last->key[shared])
        shared++;
    if (shared > depth) {
        find_leaves(items, count, shared);
        return;
    }
    size_t start = 0;
    while (start < count) {
        size_t end = start;
        while (end < count && items[end].key[depth] == items[start].key[depth])
            end++;
        find_leaves(items + start, end - start, depth + 1);
        start = end;
    }
}

/* Every leaf as its parent holds it; the hashed ones all at once (keccak_many.h), which is most
 * of a trie's hashing: the leaves hold the encodings. */
static int make_leaves(Item *items, size_t count)
{
    find_leaves(items, count, 0);
    Message *messages = PyMem_Malloc(count * sizeof(Message));
    if (messages == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t hashed = 0;
    for (Item *item = items; item < items + count; item++) {
        uint8_t path[12], value_prefix[9], list_prefix[9];
        size_t path_len = compact_path(path, item->key + item->depth, item->key_len - item->depth, 1);
        size_t value_prefix_len = 0;
        if (!(item->value_len == 1 && item->value[0] < 0x80))
            value_prefix_len = rlp_prefix(value_prefix, item->value_len, 0x80);
        size_t payload = path_len + value_prefix_len + item->value_len;
        size_t list_prefix_len = rlp_prefix(list_prefix, payload, 0xc0);
        uint8_t *p = item->head;
        memcpy(p, list_prefix, list_prefix_len), p += list_prefix_len;
        memcpy(p, path, path_len), p += path_len;
        memcpy(p, value_prefix, value_prefix_len), p += value_prefix_len;
        item->head_len = (uint8_t)(p - item->head);
        if (list_prefix_len + payload < 32) {
            memcpy(item->leaf.data, item->head, item->head_len);
            if (item->value_len)
                memcpy(item->leaf.data + item->head_len, item->value, item->value_len);
            item->leaf.len = (uint8_t)(list_prefix_len + payload);
            continue;
        }
        item->leaf.data[0] = 0xa0;
        item->leaf.len = 33;
        messages[hashed++] = (Message){item->head, item->head_len, item->value, item->value_len, item->leaf.data + 1};
    }
    keccak_many(messages, hashed);
    PyMem_Free(messages);
    return 0;
}

static void node(Ref *ref, const Item *items, size_t count, size_t depth)
{
    if (count == 1) {
        *ref = items->leaf;
        return;
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
        node(&child, items, count, shared);
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
            node(&child, items + start, end - start, depth + 1);
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
        item->value = values != NULL ? values + begin : (const uint8_t *)"";  /* every value empty: no buffer */
        item->value_len = ends[i] - begin;
    }
    Ref ref;
    int failed = make_leaves(items, count) < 0;
    if (!failed)
        node(&ref, items, count, 0);
    PyMem_Free(items);
    if (failed)
        return -1;
    if (ref.len == 33)
        memcpy(root, ref.data + 1, 32);
    else
        keccak256(ref.data, ref.len, root);  /* the root is hashed even when under 32 bytes */
    return 0;
}

#endif
