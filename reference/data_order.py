#!/usr/bin/env python3
"""The order in which `trainbench train --data-order shuffled` reads the rows of its train
split, written from the documented algorithm (src/model/data.h dataset_epoch_order, src/core/rng.h)
so that a PyTorch script can feed transformers the same batches. Standard library only.

    from data_order import epoch_order, batches
    order = epoch_order(n_rows, seed, epoch)      # list: row indices of that epoch, in order
    for rows in batches(n_rows, batch_size, seed, max_steps): ...   # rows of each step

Algorithm (epoch e, N rows, --seed S):
  stream = 2 << 48 | e            (data.c: tag 0 = epoch orders, kind STREAM_EPOCH_ORDER = 2)
  generator = xoshiro256** seeded by SplitMix64 from z = S ^ (stream * 0xD1B54A32D192ED03)
  order = [0, 1, ..., N-1]; for i = N down to 2: j = below(i); swap order[i-1], order[j]
  below(n): Lemire's multiply-shift with rejection on the top 32 bits of each u64 draw:
    m = (u64 >> 32) * n; low = m mod 2^32; if low < n: t = (2^32 - n) mod n and redraw
    while low < t; result m >> 32   (n > 2^32: u64 mod n, not needed below 4 G rows)
Step s (0-based) of the run reads epoch s // nb, batch s % nb (nb = ceil(N / B), the last batch
of an epoch may be short): rows order[b*B : (b+1)*B].  --data-order sequential: order = range(N).

`python3 reference/data_order.py` prints the vectors tests/test_data.c hard-codes.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rng_vectors import M, rotl, splitmix64  # noqa: E402 - the project's RNG, written from rng.h

STREAM_EPOCH_ORDER = 2


class Xoshiro:
    def __init__(self, seed, stream):
        z = (seed ^ ((stream * 0xD1B54A32D192ED03) & M)) & M
        self.s = []
        for _ in range(4):
            z, o = splitmix64(z)
            self.s.append(o)

    def next_u64(self):
        s = self.s
        out = (rotl((s[1] * 5) & M, 7) * 9) & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return out

    def below(self, n):
        if n > 0xFFFFFFFF:
            return self.next_u64() % n
        m = (self.next_u64() >> 32) * n
        low = m & 0xFFFFFFFF
        if low < n:
            t = ((1 << 32) - n) % n
            while low < t:
                m = (self.next_u64() >> 32) * n
                low = m & 0xFFFFFFFF
        return m >> 32


def epoch_order(n, seed, epoch):
    r = Xoshiro(seed, STREAM_EPOCH_ORDER << 48 | (epoch & ((1 << 36) - 1)))
    order = list(range(n))
    for i in range(n, 1, -1):
        j = r.below(i)
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def batches(n, batch_size, seed, steps, shuffled=True):
    """Row indices of each of `steps` training steps, as `trainbench train` reads them."""
    nb = (n + batch_size - 1) // batch_size
    cache = {}
    for s in range(steps):
        e, b = divmod(s, nb)
        if e not in cache:
            cache.clear()
            cache[e] = epoch_order(n, seed, e) if shuffled else list(range(n))
        yield cache[e][b * batch_size:(b + 1) * batch_size]


if __name__ == "__main__":
    for n, seed, epoch in [(10, 42, 0), (10, 42, 1), (7, 0, 3)]:
        print(f"epoch_order(n={n}, seed={seed}, epoch={epoch}):", epoch_order(n, seed, epoch))
