/* keccak-256 of many messages at once: with AVX-512, eight Keccak-f[1600] states side by side,
 * one in each 64-bit element of 25 vector registers, so that one instruction steps all eight
 * (a rotate is one instruction, chi's and-not-xor and theta's three-way xor another); without it,
 * one message after another by keccak.h's permutation. The tries' leaves and the logs' bloom
 * items are many short independent messages: BENCHMARKS.md, "Keccak eight messages at a time".
 * Part of _native_roots.c. */

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

/* A message's hash from a state that has absorbed its first `at` bytes, one by one. */
static void finish_one(Message *m, const uint64_t state[25], size_t at)
{
    Keccak k;
    keccak_init(&k);
    memcpy(k.state, state, sizeof k.state);
    uint8_t block[RATE];
    for (int last = 0; !last; at += RATE) {
        last = next_block(block, m, at);
        absorb_block(&k, block);
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            m->out[8 * i + j] = (uint8_t)(k.state[i] >> (8 * j));
}


#define LANES 8
#define AVX512 __attribute__((target("avx512f")))

/* Keccak-f[1600] on eight states: keccak.h's rounds with each lane a vector of eight. */
static inline ALWAYS_INLINE AVX512 void keccak_rounds_x8(__m512i *s)
#define LANE __m512i
#define XOR(a, b) _mm512_xor_si512(a, b)
#define XOR3(a, b, c) _mm512_ternarylogic_epi64(a, b, c, 0x96)
#define CHI(a, b, c) _mm512_ternarylogic_epi64(a, b, c, 0xd2)
#define ROL(x, n) _mm512_rol_epi64(x, n)
#define ROUND_CONSTANT(round) _mm512_set1_epi64((long long)ROUND_CONSTANTS[round])
#include "keccak_rounds.h"

/* Eight slots, each hashing a message; a slot whose message ends takes the next one, its state
 * zeroed. The longest messages go first, so that the slots end about together; the last two
 * or one are finished one by one, which is cheaper than eight slots with six idle (a block's
 * longest transaction can be longer than all the others together). Sorts `m`. */
static AVX512 void keccak_many_x8(Message *m, size_t count)
{
    qsort(m, count, sizeof *m, longer_first);
    __m512i s[25];
    for (int k = 0; k < 25; k++)
        s[k] = _mm512_setzero_si512();
    size_t message[LANES], at[LANES];
    int busy = 0;
    size_t next = 0;
    for (int j = 0; j < LANES; j++) {
        at[j] = 0;
        if (next < count) {
            message[j] = next++;
            busy |= 1 << j;
        }
    }
    uint64_t lanes[RATE / 8][LANES];
    uint8_t block[RATE];
    while (busy) {
        if (next == count && __builtin_popcount((unsigned)busy) < 3) {
            uint64_t states[25][LANES];
            for (int k = 0; k < 25; k++)
                _mm512_storeu_si512((void *)states[k], s[k]);
            for (int j = 0; j < LANES; j++) {
                if (!(busy >> j & 1))
                    continue;
                uint64_t state[25];
                for (int k = 0; k < 25; k++)
                    state[k] = states[k][j];
                finish_one(&m[message[j]], state, at[j]);
            }
            return;
        }
        int last = 0;
        for (int j = 0; j < LANES; j++) {
            if (!(busy >> j & 1)) {
                for (int k = 0; k < RATE / 8; k++)
                    lanes[k][j] = 0;
                continue;
            }
            last |= next_block(block, &m[message[j]], at[j]) << j;
            at[j] += RATE;
            for (int k = 0; k < RATE / 8; k++)
                lanes[k][j] = load64(block + 8 * k);
        }
        for (int k = 0; k < RATE / 8; k++)
            s[k] = _mm512_xor_si512(s[k], _mm512_loadu_si512((const void *)lanes[k]));
        keccak_rounds_x8(s);
        if (!last)
            continue;
        uint64_t out[4][LANES];
        for (int k = 0; k < 4; k++)
            _mm512_storeu_si512((void *)out[k], s[k]);
        for (int j = 0; j < LANES; j++) {
            if (!(last >> j & 1))
                continue;
            for (int k = 0; k < 4; k++)
                for (int b = 0; b < 8; b++)
                    m[message[j]].out[8 * k + b] = (uint8_t)(out[k][j] >> (8 * b));
            at[j] = 0;
            if (next < count)
                message[j] = next++;
            else
                busy &= ~(1 << j);
        }
        for (int k = 0; k < 25; k++)
            s[k] = _mm512_maskz_mov_epi64((__mmask8)~last, s[k]);  /* the finished slots' states zeroed */
    }
}
#undef AVX512
#undef LANES
#endif

static void (*keccak_many_side_by_side)(Message *, size_t) = keccak_many_one_by_one;

/* Called after init_keccak, which it relies on for __builtin_cpu_init. */
static void init_keccak_many(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f"))
        keccak_many_side_by_side = keccak_many_x8;
#endif
}

/* Eight permutations side by side cost about two of keccak.h's: below three messages, one by one. */
static void keccak_many(Message *m, size_t count)
{
    if (count < 3)
        keccak_many_one_by_one(m, count);
    else
        keccak_many_side_by_side(m, count);
}

#endif
