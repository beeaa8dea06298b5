#!/usr/bin/env python3
"""Golden values of SigridHash for tests/test_ops.c, from an independent statement in Python.

The Velox/folly CPU definition (../shared/papers/000-RAP-digest.md §3.8):
  hashed = hash_128_to_64(salt, twang_mix64(x))      (folly hash_combine on integers)
  maxValue == 1 -> 0, else the multiply-shift remainder with computeMultiperAndShift(d, 63).
This script evaluates the multiply-shift form literally with Python's big integers (with
ceil(log2 d) as the UDF computes it in floating point) and checks it equals Python's floor
modulo of the signed hash, then prints C initialisers {x, salt, max_value, expected}.
Run: python3 dev/sigrid_golden.py > /tmp/golden.inc
"""
import math
import random

M64 = (1 << 64) - 1
K_MUL = 0x9DDFEA08EB382D69


def twang_mix64(k):
    k = ((~k) + (k << 21)) & M64
    k ^= k >> 24
    k = (k + (k << 3) + (k << 8)) & M64
    k ^= k >> 14
    k = (k + (k << 2) + (k << 4)) & M64
    k ^= k >> 28
    k = (k + (k << 31)) & M64
    return k


def hash_128_to_64(upper, lower):
    a = ((lower ^ upper) * K_MUL) & M64
    a ^= a >> 47
    b = ((upper ^ a) * K_MUL) & M64
    b ^= b >> 47
    return (b * K_MUL) & M64


def signed(u):
    return u - (1 << 64) if u >> 63 else u


def magic(d):
    l = math.ceil(math.log2(d))
    low = (1 << (64 + l)) // d
    high = ((1 << (64 + l)) + (1 << (64 + l - 63))) // d
    while low // 2 < high // 2 and l > 0:
        low //= 2
        high //= 2
        l -= 1
    return high, l


def sigrid_hash(x, salt, d):
    if d == 1:
        return 0
    hashed = signed(hash_128_to_64(salt & M64, twang_mix64(x & M64)))
    mult, shift = magic(d)
    sign = -1 if hashed < 0 else 0
    q = sign ^ ((mult * ((sign ^ hashed) & M64)) >> (64 + shift))
    out = hashed - q * d
    assert out == hashed % d, (x, salt, d)
    return out


def main():
    rng = random.Random(7)
    cases = []
    divisors = [1, 2, 3, 7, 1460, 10131227, 1 << 20, (1 << 31) - 1, 10 ** 12 + 39]
    xs = [0, 1, -1, 2 ** 63 - 1, -2 ** 63, 0xDEADBEEF]
    salts = [0, 1, -7, 2 ** 62 + 12345]
    for d in divisors:
        for x in xs:
            cases.append((x, rng.choice(salts), d))
    for _ in range(40):
        cases.append((rng.randrange(-2 ** 63, 2 ** 63), rng.randrange(-2 ** 63, 2 ** 63),
                      rng.randrange(1, 2 ** rng.randrange(2, 52))))
    for x, salt, d in cases:
        def lit(v):
            return "INT64_MIN" if v == -2 ** 63 else "INT64_C(%d)" % v
        print("    {%s, %s, %s, %s}," % (lit(x), lit(salt), lit(d), lit(sigrid_hash(x, salt, d))))


if __name__ == "__main__":
    main()
