/* The body of a function (Message *m, size_t count, Started *started, int nstarted) hashing the
 * `nstarted` messages begun in a wider way, then the `count` messages `m`, in SLOTS slots side by
 * side, each a lane of VEC vectors: a slot whose message ends takes the next one, its state
 * zeroed. The longest messages go first, so that the slots end about together; once fewer than
 * FEWEST slots are busy and no message is left to start, FINISH(rest, n) hashes the rest in a
 * narrower way, cheaper than a vector of idle slots (a block's longest transaction can be longer
 * than all its others together). Sorts `m`. Included by keccak_many.h with SLOTS, VEC, VLOAD(p),
 * VSTORE(p, v), VXOR(a, b), ZERO_SLOTS(v, slots) (the lanes of the bits of `slots` zeroed),
 * PERMUTE(s), FEWEST, FINISH and FINISH_TAKES (how many FINISH can take) defined first; it
 * undefines them after. Part of _native_roots.c; no include guard, on purpose. */
{
    _Static_assert(FEWEST - 1 <= FINISH_TAKES, "FINISH takes every message left");
    if (count > 1)
        qsort(m, count, sizeof *m, longer_first);
    Message *message[SLOTS];
    size_t at[SLOTS];
    uint64_t lanes[25][SLOTS];  /* the slots' states in and out, and the blocks they absorb */
    memset(lanes, 0, sizeof lanes);
    int busy = 0;
    size_t next = 0;
    for (int j = 0; j < SLOTS; j++) {
        if (j < nstarted) {
            message[j] = started[j].m;
            at[j] = started[j].at;
            for (int k = 0; k < 25; k++)
                lanes[k][j] = started[j].state[k];
        } else if (next < count) {
            message[j] = &m[next++];
            at[j] = 0;
        } else {
            continue;
        }
        busy |= 1 << j;
    }
    VEC s[25];
    for (int k = 0; k < 25; k++)
        s[k] = VLOAD(lanes[k]);
    uint8_t block[RATE];
    while (busy) {
        if (next == count && __builtin_popcount((unsigned)busy) < FEWEST) {
            Started rest[SLOTS];
            int n = 0;
            for (int k = 0; k < 25; k++)
                VSTORE(lanes[k], s[k]);
            for (int j = 0; j < SLOTS; j++) {
                if (!(busy >> j & 1))
                    continue;
                rest[n].m = message[j];
                rest[n].at = at[j];
                for (int k = 0; k < 25; k++)
                    rest[n].state[k] = lanes[k][j];
                n++;
            }
            FINISH(rest, n);
            return;
        }
        int last = 0;
        for (int j = 0; j < SLOTS; j++) {
            if (!(busy >> j & 1)) {
                for (int k = 0; k < RATE / 8; k++)
                    lanes[k][j] = 0;
                continue;
            }
            last |= next_block(block, message[j], at[j]) << j;
            at[j] += RATE;
            for (int k = 0; k < RATE / 8; k++)
                lanes[k][j] = load64(block + 8 * k);
        }
        for (int k = 0; k < RATE / 8; k++)
            s[k] = VXOR(s[k], VLOAD(lanes[k]));
        PERMUTE(s);
        if (!last)
            continue;
        for (int k = 0; k < 4; k++)
            VSTORE(lanes[k], s[k]);
        for (int j = 0; j < SLOTS; j++) {
            if (!(last >> j & 1))
                continue;
            for (int k = 0; k < 4; k++)
                for (int b = 0; b < 8; b++)
                    message[j]->out[8 * k + b] = (uint8_t)(lanes[k][j] >> (8 * b));
            at[j] = 0;
            if (next < count)
                message[j] = &m[next++];
            else
                busy &= ~(1 << j);
        }
        for (int k = 0; k < 25; k++)
            s[k] = ZERO_SLOTS(s[k], last);  /* the finished slots' states zeroed */
    }
}
#undef SLOTS
#undef VEC
#undef VLOAD
#undef VSTORE
#undef VXOR
#undef ZERO_SLOTS
#undef PERMUTE
#undef FEWEST
#undef FINISH
#undef FINISH_TAKES
