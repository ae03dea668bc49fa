/* The body of Keccak-f[1600] on the lanes `s[0..24]`, each round written out (theta, rho and pi,
 * chi, iota) with the lanes in locals, so that the compiler keeps most in registers. Included as
 * a function's body, with what a lane is and how it is xored, rotated and chi'd defined first:
 * keccak.h includes it for 64-bit lanes, keccak_many.h for eight of them in an AVX-512 register
 * and four in an AVX2 one.
 * LANE, XOR(a, b), XOR3(a, b, c), CHI(a, b, c) = a ^ (~b & c), ROL(x, n), ROUND_CONSTANT(round).
 * It undefines them after. Part of _native_roots.c; no include guard, on purpose. */
{
    LANE a00 = s[0], a01 = s[1], a02 = s[2], a03 = s[3], a04 = s[4];
    LANE a05 = s[5], a06 = s[6], a07 = s[7], a08 = s[8], a09 = s[9];
    LANE a10 = s[10], a11 = s[11], a12 = s[12], a13 = s[13], a14 = s[14];
    LANE a15 = s[15], a16 = s[16], a17 = s[17], a18 = s[18], a19 = s[19];
    LANE a20 = s[20], a21 = s[21], a22 = s[22], a23 = s[23], a24 = s[24];
    for (int round = 0; round < 24; round++) {
        LANE c0 = XOR3(XOR3(a00, a05, a10), a15, a20);
        LANE c1 = XOR3(XOR3(a01, a06, a11), a16, a21);
        LANE c2 = XOR3(XOR3(a02, a07, a12), a17, a22);
        LANE c3 = XOR3(XOR3(a03, a08, a13), a18, a23);
        LANE c4 = XOR3(XOR3(a04, a09, a14), a19, a24);
        LANE d0 = XOR(c4, ROL(c1, 1)), d1 = XOR(c0, ROL(c2, 1)), d2 = XOR(c1, ROL(c3, 1));
        LANE d3 = XOR(c2, ROL(c4, 1)), d4 = XOR(c3, ROL(c0, 1));
        /* b[y][2x+3y] = rot(a[x][y] ^ d[x], r[x][y]), lane index x + 5y */
        LANE b00 = XOR(a00, d0);
        LANE b10 = ROL(XOR(a01, d1), 1);
        LANE b20 = ROL(XOR(a02, d2), 62);
        LANE b05 = ROL(XOR(a03, d3), 28);
        LANE b15 = ROL(XOR(a04, d4), 27);
        LANE b16 = ROL(XOR(a05, d0), 36);
        LANE b01 = ROL(XOR(a06, d1), 44);
        LANE b11 = ROL(XOR(a07, d2), 6);
        LANE b21 = ROL(XOR(a08, d3), 55);
        LANE b06 = ROL(XOR(a09, d4), 20);
        LANE b07 = ROL(XOR(a10, d0), 3);
        LANE b17 = ROL(XOR(a11, d1), 10);
        LANE b02 = ROL(XOR(a12, d2), 43);
        LANE b12 = ROL(XOR(a13, d3), 25);
        LANE b22 = ROL(XOR(a14, d4), 39);
        LANE b23 = ROL(XOR(a15, d0), 41);
        LANE b08 = ROL(XOR(a16, d1), 45);
        LANE b18 = ROL(XOR(a17, d2), 15);
        LANE b03 = ROL(XOR(a18, d3), 21);
        LANE b13 = ROL(XOR(a19, d4), 8);
        LANE b14 = ROL(XOR(a20, d0), 18);
        LANE b24 = ROL(XOR(a21, d1), 2);
        LANE b09 = ROL(XOR(a22, d2), 61);
        LANE b19 = ROL(XOR(a23, d3), 56);
        LANE b04 = ROL(XOR(a24, d4), 14);
        a00 = XOR(CHI(b00, b01, b02), ROUND_CONSTANT(round));
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
}
#undef LANE
#undef XOR
#undef XOR3
#undef CHI
#undef ROL
#undef ROUND_CONSTANT
