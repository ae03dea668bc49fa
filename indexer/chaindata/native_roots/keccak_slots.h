/* The body of a function hashing `count` messages `m` in SLOTS slots side by side, each a lane
 * of VEC vectors: a slot whose message ends takes the next one, its state zeroed. The longest
 * messages go first, so that the slots end about together; once fewer than FEWEST slots are busy
 * and no message is left to start, the last are finished one by one, which is cheaper than a
 * vector of idle slots (a block's longest transaction can be longer than all the others
 * together). Sorts `m`. Included by keccak_many.h with SLOTS, VEC, VZERO(), VLOAD(p),
 * VSTORE(p, v), VXOR(a, b), ZERO_SLOTS(v, slots) (the lanes of the bits of `slots` zeroed),
 * PERMUTE(s) and FEWEST defined first; it undefines them after. Part of _native_roots.c; no
 * include guard, on purpose. */
{
    qsort(m, count, sizeof *m, longer_first);
    VEC s[25];
    for (int k = 0; k < 25; k++)
        s[k] = VZERO();
    size_t message[SLOTS], at[SLOTS];
    int busy = 0;
    size_t next = 0;
    for (int j = 0; j < SLOTS; j++) {
        at[j] = 0;
        if (next < count) {
            message[j] = next++;
            busy |= 1 << j;
        }
    }
    uint64_t lanes[RATE / 8][SLOTS];
    uint8_t block[RATE];
    while (busy) {
        if (next == count && __builtin_popcount((unsigned)busy) < FEWEST) {
            uint64_t states[25][SLOTS];
            for (int k = 0; k < 25; k++)
                VSTORE(states[k], s[k]);
            for (int j = 0; j < SLOTS; j++) {
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
        for (int j = 0; j < SLOTS; j++) {
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
            s[k] = VXOR(s[k], VLOAD(lanes[k]));
        PERMUTE(s);
        if (!last)
            continue;
        uint64_t out[4][SLOTS];
        for (int k = 0; k < 4; k++)
            VSTORE(out[k], s[k]);
        for (int j = 0; j < SLOTS; j++) {
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
            s[k] = ZERO_SLOTS(s[k], last);  /* the finished slots' states zeroed */
    }
}
#undef SLOTS
#undef VEC
#undef VZERO
#undef VLOAD
#undef VSTORE
#undef VXOR
#undef ZERO_SLOTS
#undef PERMUTE
#undef FEWEST
