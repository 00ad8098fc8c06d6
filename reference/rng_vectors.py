#!/usr/bin/env python3
"""Independent Python implementation of trainbench's RNG (src/core/rng.h documents the algorithm).

Prints the test vectors that tests/test_rng.c hard-codes, so the C expectations come from a
second implementation written from the documented algorithm, not from the C code itself.
Needs only the Python standard library:  python3 reference/rng_vectors.py
"""
import math
import struct

M = (1 << 64) - 1


def splitmix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M
    x = z
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return z, x ^ (x >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M


def xoshiro(seed, stream, n):
    z = (seed ^ ((stream * 0xD1B54A32D192ED03) & M)) & M
    s = []
    for _ in range(4):
        z, o = splitmix64(z)
        s.append(o)
    out = []
    for _ in range(n):
        out.append((rotl((s[1] * 5) & M, 7) * 9) & M)
        t = (s[1] << 17) & M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
    return out


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def normals(seed, stream, count):
    v = xoshiro(seed, stream, 10 * count + 10)
    i, res = 0, []
    while len(res) < count:
        u = 2.0 * ((v[i] >> 11) * 2.0**-53) - 1
        w = 2.0 * ((v[i + 1] >> 11) * 2.0**-53) - 1
        i += 2
        s = u * u + w * w
        if s >= 1 or s == 0:
            continue
        f = math.sqrt(-2 * math.log(s) / s)
        res += [f32(u * f), f32(w * f)]
    return res[:count]


if __name__ == "__main__":
    for seed, stream in [(0, 0), (42, 0), (42, 7)]:
        print(f"u64 seed={seed} stream={stream}:", ", ".join(f"0x{v:016x}" for v in xoshiro(seed, stream, 4)))
    print("normal(0,1) seed=42 stream=0:", ", ".join(float.hex(x) for x in normals(42, 0, 6)))
