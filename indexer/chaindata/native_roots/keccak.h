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

/* Keccak-f[1600] with the 25 lanes in locals, each round written out (theta, rho and pi, chi,
 * iota): gcc keeps most lanes in registers. Compiled twice, below. */
static inline ALWAYS_INLINE void keccak_rounds(uint64_t *s)
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
