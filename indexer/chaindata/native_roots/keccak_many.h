/* keccak-256 of many messages at once: with AVX-512, eight Keccak-f[1600] states side by side,
 * one in each 64-bit element of 25 vector registers, so that one instruction steps all eight
 * (a rotate is one instruction, chi's and-not-xor and theta's three-way xor another); with AVX2
 * alone, four; without either, one message after another by keccak.h's permutation. The tries'
 * leaves and the logs' bloom items are many short independent messages: BENCHMARKS.md, "Keccak
 * eight messages at a time" and "Keccak four messages at a time". Part of _native_roots.c. */

#ifndef NATIVE_ROOTS_KECCAK_MANY_H
#define NATIVE_ROOTS_KECCAK_MANY_H

#include <stdlib.h>

#include "keccak.h"

/* A message is a head (an RLP prefix and path, a few bytes) and a body, hashed as one; its
 * hash goes to `out`. */
typedef struct {
    const uint8_t *head;
    size_t head_len;
    const uint8_t *body;
    size_t body_len;
    uint8_t *out;
} Message;

static void keccak_many_one_by_one(Message *m, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        Keccak k;
        keccak_init(&k);
        keccak_update(&k, m[i].head, m[i].head_len);
        keccak_update(&k, m[i].body, m[i].body_len);
        keccak_final(&k, m[i].out);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* The next block of a message from byte `at` on, padded when it is the last: returns 1 then. */
static int next_block(uint8_t block[RATE], const Message *m, size_t at)
{
    size_t total = m->head_len + m->body_len;
    size_t take = total - at < RATE ? total - at : RATE;
    size_t from_head = 0;
    if (at < m->head_len) {
        from_head = m->head_len - at < take ? m->head_len - at : take;
        memcpy(block, m->head + at, from_head);
    }
    if (take > from_head)
        memcpy(block + from_head, m->body + (at + from_head - m->head_len), take - from_head);
    if (take == RATE)
        return 0;
    memset(block + take, 0, RATE - take);
    block[take] ^= 0x01;
    block[RATE - 1] ^= 0x80;
    return 1;
}

static int longer_first(const void *a, const void *b)
{
    size_t x = ((const Message *)a)->head_len + ((const Message *)a)->body_len;
    size_t y = ((const Message *)b)->head_len + ((const Message *)b)->body_len;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* A message partly hashed: its state once its first `at` bytes are absorbed. */
typedef struct {
    Message *m;
    size_t at;
    uint64_t state[25];
} Started;

/* The rest of each started message, one by one: keccak.h's hash resumed from its state (`at` is
 * a whole number of blocks, so nothing is pending). */
static void finish_one_by_one(Started *started, int n)
{
    for (Started *one = started; one < started + n; one++) {
        const Message *m = one->m;
        Keccak k;
        keccak_init(&k);
        memcpy(k.state, one->state, sizeof k.state);
        if (one->at < m->head_len) {
            keccak_update(&k, m->head + one->at, m->head_len - one->at);
            keccak_update(&k, m->body, m->body_len);
        } else {
            keccak_update(&k, m->body + (one->at - m->head_len), m->body_len - (one->at - m->head_len));
        }
        keccak_final(&k, m->out);
    }
}

#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2")))

/* Keccak-f[1600] on eight states: keccak.h's rounds with each lane a vector of eight, a rotate
 * one instruction and chi's and-not-xor, like theta's three-way xor, another. */
static inline ALWAYS_INLINE AVX512 void keccak_rounds_x8(__m512i *s)
#define LANE __m512i
#define XOR(a, b) _mm512_xor_si512(a, b)
#define XOR3(a, b, c) _mm512_ternarylogic_epi64(a, b, c, 0x96)
#define CHI(a, b, c) _mm512_ternarylogic_epi64(a, b, c, 0xd2)
#define ROL(x, n) _mm512_rol_epi64(x, n)
#define ROUND_CONSTANT(round) _mm512_set1_epi64((long long)ROUND_CONSTANTS[round])
#include "keccak_rounds.h"

/* Four states in AVX2's vectors, for a processor without AVX-512: no rotate instruction (two
 * shifts and an or) and no three-input logic. */
static inline ALWAYS_INLINE AVX2 void keccak_rounds_x4(__m256i *s)
#define LANE __m256i
#define XOR(a, b) _mm256_xor_si256(a, b)
#define XOR3(a, b, c) _mm256_xor_si256(_mm256_xor_si256(a, b), c)
#define CHI(a, b, c) _mm256_xor_si256(a, _mm256_andnot_si256(b, c))
#define ROL(x, n) _mm256_or_si256(_mm256_slli_epi64(x, n), _mm256_srli_epi64(x, 64 - (n)))
#define ROUND_CONSTANT(round) _mm256_set1_epi64x((long long)ROUND_CONSTANTS[round])
#include "keccak_rounds.h"

static inline AVX2 __m256i zero_slots_x4(__m256i v, int slots)
{
    __m256i finished = _mm256_set_epi64x(-(long long)(slots >> 3 & 1), -(long long)(slots >> 2 & 1),
                                         -(long long)(slots >> 1 & 1), -(long long)(slots & 1));
    return _mm256_andnot_si256(finished, v);
}

/* Four side by side cost about 1.6 of keccak.h's permutations: the last one goes alone. */
static AVX2 void keccak_x4(Message *m, size_t count, Started *started, int nstarted)
#define SLOTS 4
#define VEC __m256i
#define VLOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define VSTORE(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define VXOR(a, b) _mm256_xor_si256(a, b)
#define ZERO_SLOTS(v, slots) zero_slots_x4(v, slots)
#define PERMUTE keccak_rounds_x4
#define FEWEST 2
#define FINISH finish_one_by_one
#define FINISH_TAKES SLOTS  /* any number */
#include "keccak_slots.h"

/* Eight side by side cost about two of keccak.h's permutations, and four (on this machine's
 * AVX-512 processor) about 1.6: the last four go on four at a time (BENCHMARKS.md, "Keccak four
 * messages at a time"). */
static AVX512 void keccak_x8(Message *m, size_t count, Started *started, int nstarted)
#define SLOTS 8
#define VEC __m512i
#define VLOAD(p) _mm512_loadu_si512((const void *)(p))
#define VSTORE(p, v) _mm512_storeu_si512((void *)(p), v)
#define VXOR(a, b) _mm512_xor_si512(a, b)
#define ZERO_SLOTS(v, slots) _mm512_maskz_mov_epi64((__mmask8)~(slots), v)
#define PERMUTE keccak_rounds_x8
#define FEWEST 5
#define FINISH(rest, n) keccak_x4(NULL, 0, rest, n)
#define FINISH_TAKES 4  /* keccak_x4's slots */
#include "keccak_slots.h"

/* The ways without messages started elsewhere, each handing a count too small for it on. */
static void keccak_many_x4(Message *m, size_t count)
{
    if (count < 2)
        keccak_many_one_by_one(m, count);
    else
        keccak_x4(m, count, NULL, 0);
}

static void keccak_many_x8(Message *m, size_t count)
{
    if (count < 5)
        keccak_many_x4(m, count);
    else
        keccak_x8(m, count, NULL, 0);
}
#undef AVX512
#undef AVX2
#endif

/* The ways to hash many messages, the fastest first. */
typedef struct {
    const char *name;
    void (*hash)(Message *, size_t);
} ManyWay;

static const ManyWay MANY_WAYS[] = {
#if defined(__x86_64__) && defined(__GNUC__)
    {"avx512", keccak_many_x8},
    {"avx2", keccak_many_x4},
#endif
    {"one by one", keccak_many_one_by_one},
};
#define MANY_WAYS_COUNT (sizeof MANY_WAYS / sizeof MANY_WAYS[0])

static const ManyWay *keccak_many_way = &MANY_WAYS[MANY_WAYS_COUNT - 1];

/* Whether this processor runs `way`; after init_keccak, which calls __builtin_cpu_init. */
static int runs(const ManyWay *way)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (strcmp(way->name, "avx512") == 0)
        return __builtin_cpu_supports("avx512f");
    if (strcmp(way->name, "avx2") == 0)
        return __builtin_cpu_supports("avx2");
#endif
    return 1;
}

static void init_keccak_many(void)
{
    for (size_t i = 0; i < MANY_WAYS_COUNT; i++)
        if (runs(&MANY_WAYS[i])) {
            keccak_many_way = &MANY_WAYS[i];
            return;
        }
}

static void keccak_many(Message *m, size_t count)
{
    keccak_many_way->hash(m, count);
}

#endif
