/* keccak-256 of many messages at once: with AVX-512, eight Keccak-f[1600] states side by side,
 * one in each 64-bit element of 25 vector registers, so that one instruction steps all eight
 * (a rotate is one instruction, chi's and-not-xor and theta's three-way xor another); without it,
 * one message after another by keccak.h's permutation. The tries' leaves and the logs' bloom
 * items are many short independent messages: BENCHMARKS.md, "Keccak eight messages at a time".
 * Part of _native_roots.c. */

#ifndef NATIVE_ROOTS_KECCAK_MANY_H
#define NATIVE_ROOTS_KECCAK_MANY_H

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

/* Keccak-f[1600] on eight states: keccak.h's rounds with each lane a vector. */
static inline ALWAYS_INLINE AVX512 void keccak_rounds_x8(__m512i *s)
{
#define XOR3(a, b, c) _mm512_ternarylogic_epi64(a, b, c, 0x96)
#define CHI(a, b, c) _mm512_ternarylogic_epi64(a, b, c, 0xd2) /* a ^ (~b & c) */
#define ROL(x, n) _mm512_rol_epi64(x, n)
    __m512i a00 = s[0], a01 = s[1], a02 = s[2], a03 = s[3], a04 = s[4];
    __m512i a05 = s[5], a06 = s[6], a07 = s[7], a08 = s[8], a09 = s[9];
    __m512i a10 = s[10], a11 = s[11], a12 = s[12], a13 = s[13], a14 = s[14];
    __m512i a15 = s[15], a16 = s[16], a17 = s[17], a18 = s[18], a19 = s[19];
    __m512i a20 = s[20], a21 = s[21], a22 = s[22], a23 = s[23], a24 = s[24];
    for (int round = 0; round < 24; round++) {
        __m512i c0 = XOR3(XOR3(a00, a05, a10), a15, a20);
        __m512i c1 = XOR3(XOR3(a01, a06, a11), a16, a21);
        __m512i c2 = XOR3(XOR3(a02, a07, a12), a17, a22);
        __m512i c3 = XOR3(XOR3(a03, a08, a13), a18, a23);
        __m512i c4 = XOR3(XOR3(a04, a09, a14), a19, a24);
        __m512i d0 = _mm512_xor_si512(c4, ROL(c1, 1)), d1 = _mm512_xor_si512(c0, ROL(c2, 1));
        __m512i d2 = _mm512_xor_si512(c1, ROL(c3, 1)), d3 = _mm512_xor_si512(c2, ROL(c4, 1));
        __m512i d4 = _mm512_xor_si512(c3, ROL(c0, 1));
        __m512i b00 = _mm512_xor_si512(a00, d0);
        __m512i b10 = ROL(_mm512_xor_si512(a01, d1), 1);
        __m512i b20 = ROL(_mm512_xor_si512(a02, d2), 62);
        __m512i b05 = ROL(_mm512_xor_si512(a03, d3), 28);
        __m512i b15 = ROL(_mm512_xor_si512(a04, d4), 27);
        __m512i b16 = ROL(_mm512_xor_si512(a05, d0), 36);
        __m512i b01 = ROL(_mm512_xor_si512(a06, d1), 44);
        __m512i b11 = ROL(_mm512_xor_si512(a07, d2), 6);
        __m512i b21 = ROL(_mm512_xor_si512(a08, d3), 55);
        __m512i b06 = ROL(_mm512_xor_si512(a09, d4), 20);
        __m512i b07 = ROL(_mm512_xor_si512(a10, d0), 3);
        __m512i b17 = ROL(_mm512_xor_si512(a11, d1), 10);
        __m512i b02 = ROL(_mm512_xor_si512(a12, d2), 43);
        __m512i b12 = ROL(_mm512_xor_si512(a13, d3), 25);
        __m512i b22 = ROL(_mm512_xor_si512(a14, d4), 39);
        __m512i b23 = ROL(_mm512_xor_si512(a15, d0), 41);
        __m512i b08 = ROL(_mm512_xor_si512(a16, d1), 45);
        __m512i b18 = ROL(_mm512_xor_si512(a17, d2), 15);
        __m512i b03 = ROL(_mm512_xor_si512(a18, d3), 21);
        __m512i b13 = ROL(_mm512_xor_si512(a19, d4), 8);
        __m512i b14 = ROL(_mm512_xor_si512(a20, d0), 18);
        __m512i b24 = ROL(_mm512_xor_si512(a21, d1), 2);
        __m512i b09 = ROL(_mm512_xor_si512(a22, d2), 61);
        __m512i b19 = ROL(_mm512_xor_si512(a23, d3), 56);
        __m512i b04 = ROL(_mm512_xor_si512(a24, d4), 14);
        a00 = _mm512_xor_si512(CHI(b00, b01, b02), _mm512_set1_epi64((long long)ROUND_CONSTANTS[round]));
        a01 = CHI(b01, b02, b03);
        a02 = CHI(b02, b03, b04);
        a03 = CHI(b03, b04, b00);
        a04 = CHI(b04, b00, b01);
        a05 = CHI(b05, b06, b07);
        a06 = CHI(b06, b07, b08);
        a07 = CHI(b07, b08, b09);
        a08 = CHI(b08, b09, b05);
        a09 = CHI(b09, b05, b06);
        a10 = CHI(b10, b11, b12);
        a11 = CHI(b11, b12, b13);
        a12 = CHI(b12, b13, b14);
        a13 = CHI(b13, b14, b10);
        a14 = CHI(b14, b10, b11);
        a15 = CHI(b15, b16, b17);
        a16 = CHI(b16, b17, b18);
        a17 = CHI(b17, b18, b19);
        a18 = CHI(b18, b19, b15);
        a19 = CHI(b19, b15, b16);
        a20 = CHI(b20, b21, b22);
        a21 = CHI(b21, b22, b23);
        a22 = CHI(b22, b23, b24);
        a23 = CHI(b23, b24, b20);
        a24 = CHI(b24, b20, b21);
    }
    s[0] = a00; s[1] = a01; s[2] = a02; s[3] = a03; s[4] = a04;
    s[5] = a05; s[6] = a06; s[7] = a07; s[8] = a08; s[9] = a09;
    s[10] = a10; s[11] = a11; s[12] = a12; s[13] = a13; s[14] = a14;
    s[15] = a15; s[16] = a16; s[17] = a17; s[18] = a18; s[19] = a19;
    s[20] = a20; s[21] = a21; s[22] = a22; s[23] = a23; s[24] = a24;
#undef XOR3
#undef CHI
#undef ROL
}

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
