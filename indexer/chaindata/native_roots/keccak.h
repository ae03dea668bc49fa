/* keccak-256, the original Keccak padding (not SHA-3's): Keccak-f[1600] and an incremental
 * hash over it, for the tries' nodes and the logs' blooms. Part of _native_roots.c. */

#ifndef NATIVE_ROOTS_KECCAK_H
#define NATIVE_ROOTS_KECCAK_H

#include <stdint.h>
#include <string.h>

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

#if defined(__GNUC__)
#define ALWAYS_INLINE __attribute__((always_inline))  /* into each of the two permutations below */
#else
#define ALWAYS_INLINE
#endif

/* Keccak-f[1600] on one state. Compiled twice, below. */
static inline ALWAYS_INLINE void keccak_rounds(uint64_t *s)
#define LANE uint64_t
#define XOR(a, b) ((a) ^ (b))
#define XOR3(a, b, c) ((a) ^ (b) ^ (c))
#define CHI(a, b, c) ((a) ^ (~(b) & (c)))
#define ROL(x, n) ROTL(x, n)
#define ROUND_CONSTANT(round) ROUND_CONSTANTS[round]
#include "keccak_rounds.h"

/* The permutation for any x86-64 (or other) processor, and for one with BMI1 and BMI2, whose
 * and-not and flagless rotates make it 0.85x the CPU (BENCHMARKS.md, "Keccak with BMI1 and BMI2"):
 * init_keccak picks at import, so a build runs on any processor of its architecture. */
static void keccak_f_any(uint64_t *s) { keccak_rounds(s); }
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("bmi,bmi2"))) static void keccak_f_bmi2(uint64_t *s) { keccak_rounds(s); }
#endif
static void (*keccak_f)(uint64_t *) = keccak_f_any;

static void init_keccak(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2"))
        keccak_f = keccak_f_bmi2;
#endif
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
    void (*permute)(uint64_t *);
} Keccak;

static void keccak_init(Keccak *k)
{
    memset(k, 0, sizeof *k);
    k->permute = keccak_f;
}

static void absorb_block(Keccak *k, const uint8_t *block)
{
    for (int i = 0; i < RATE / 8; i++)
        k->state[i] ^= load64(block + 8 * i);
    k->permute(k->state);
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

/* With `permute` NULL, the one init_keccak picked. */
static void keccak256_with(void (*permute)(uint64_t *), const uint8_t *data, size_t n, uint8_t out[32])
{
    Keccak k;
    keccak_init(&k);
    if (permute != NULL)
        k.permute = permute;
    keccak_update(&k, data, n);
    keccak_final(&k, out);
}

static void keccak256(const uint8_t *data, size_t n, uint8_t out[32])
{
    keccak256_with(NULL, data, n, out);
}

#endif
