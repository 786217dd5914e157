"""Every collective and point-to-point call over 2-4 processes, numpy arrays of each dtype,
results compared in full with what numpy computes."""

import numpy as np
import pytest

import tpcomm as dist

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]


def _val(rank, n, dtype, base=1):
    """Rank-dependent values that stay exact in every dtype."""
    if dtype == "bool":
        return (np.arange(n) + rank) % 2 == 0
    return ((np.arange(n) + rank * 3 + base) % 7).astype(dtype)


def w_collectives(rank, world, dtypes):
    n = 6
    for dt in dtypes:
        every = [_val(r, n, dt) for r in range(world)]
        mine = every[rank]
        # all_reduce: SUM (bool: logical or), MAX, MIN; PRODUCT on integers.
        ops = [(dist.ReduceOp.MAX, np.maximum.reduce), (dist.ReduceOp.MIN, np.minimum.reduce)]
        if dt != "bool":
            ops.append((dist.ReduceOp.SUM, lambda xs: np.sum(xs, axis=0, dtype=dt)))
        for op, ref in ops:
            a = mine.copy()
            assert dist.all_reduce(a, op=op) is None
            assert np.array_equal(a, ref(np.stack(every))), (dt, op, a)
        if dt not in ("bool", "float16", "float32", "float64"):
            for op, ref in [(dist.ReduceOp.BAND, np.bitwise_and.reduce),
                            (dist.ReduceOp.BOR, np.bitwise_or.reduce),
                            (dist.ReduceOp.BXOR, np.bitwise_xor.reduce)]:
                a = mine.copy()
                dist.all_reduce(a, op=op)
                assert np.array_equal(a, ref(np.stack(every))), (dt, op)
        # broadcast from the last rank.
        b = mine.copy()
        dist.broadcast(b, src=world - 1)
        assert np.array_equal(b, every[-1])
        # reduce to rank 1 (others unchanged).
        if dt != "bool":
            c = mine.copy()
            dist.reduce(c, dst=1, op=dist.ReduceOp.SUM)
            want = np.sum(np.stack(every), axis=0, dtype=dt) if rank == 1 else mine
            assert np.array_equal(c, want)
        # all_gather (list and tensor forms).
        lst = [np.zeros(n, dtype=dt) for _ in range(world)]
        dist.all_gather(lst, mine)
        assert all(np.array_equal(x, e) for x, e in zip(lst, every))
        flat = np.zeros(world * n, dtype=dt)
        dist.all_gather_into_tensor(flat, mine)
        assert np.array_equal(flat, np.concatenate(every))
        # gather to rank 0, scatter from rank 0.
        gl = [np.zeros(n, dtype=dt) for _ in range(world)] if rank == 0 else None
        dist.gather(mine, gl, dst=0)
        if rank == 0:
            assert all(np.array_equal(x, e) for x, e in zip(gl, every))
        out = np.zeros(n, dtype=dt)
        dist.scatter(out, [every[r] for r in range(world)] if rank == 0 else None, src=0)
        assert np.array_equal(out, every[rank])
        # reduce_scatter (list and tensor forms): block r of each input sums into rank r.
        if dt != "bool":
            blocks = [_val(rank + r, n, dt, base=2) for r in range(world)]
            want = np.sum(np.stack([_val(q + rank, n, dt, base=2) for q in range(world)]),
                          axis=0, dtype=dt)
            o = np.zeros(n, dtype=dt)
            dist.reduce_scatter(o, blocks)
            assert np.array_equal(o, want)
            o2 = np.zeros(n, dtype=dt)
            dist.reduce_scatter_tensor(o2, np.concatenate(blocks))
            assert np.array_equal(o2, want)
        # all_to_all: rank q's block r goes to rank r as its block q.
        ins = [np.full(n, r * 10 + rank, dtype=dt) if dt != "bool" else _val(r + rank, n, dt)
               for r in range(world)]
        outs = [np.zeros(n, dtype=dt) for _ in range(world)]
        dist.all_to_all(outs, ins)
        for q in range(world):
            exp = (np.full(n, rank * 10 + q, dtype=dt) if dt != "bool"
                   else _val(rank + q, n, dt))
            assert np.array_equal(outs[q], exp)
        dist.barrier()


@pytest.mark.parametrize("world", [2, 3, 4])
def test_collectives_every_dtype(ranks, world):
    ranks(world, w_collectives, DTYPES)


def w_all_to_all_single(rank, world):
    # Even blocks, 2-d (split along dim 0), then uneven splits: rank q sends q+1+r rows to r.
    x = np.arange(world * 2 * 3, dtype=np.int32).reshape(world * 2, 3) + rank * 100
    y = np.zeros_like(x)
    dist.all_to_all_single(y, x)
    for q in range(world):
        assert np.array_equal(y[2 * q:2 * q + 2], x[2 * rank:2 * rank + 2] - rank * 100 + q * 100)
    send = [rank + 1 + r for r in range(world)]
    recv = [q + 1 + rank for q in range(world)]
    x = np.concatenate([np.full((s, 2), rank * 10 + r, dtype=np.float64)
                        for r, s in enumerate(send)])
    y = np.zeros((sum(recv), 2))
    dist.all_to_all_single(y, x, output_split_sizes=recv, input_split_sizes=send)
    want = np.concatenate([np.full((s, 2), q * 10 + rank) for q, s in enumerate(recv)])
    assert np.array_equal(y, want)


def test_all_to_all_single(ranks):
    ranks(3, w_all_to_all_single)


def w_reduce_ops(rank, world):
    a = np.array([1.0, 2.0, 4.0], dtype=np.float32) * (rank + 1)
    dist.all_reduce(a, op=dist.ReduceOp.AVG)
    assert np.allclose(a, np.array([1.0, 2.0, 4.0]) * (world + 1) / 2)
    b = np.full(3, rank + 2.0)
    dist.all_reduce(b, op=dist.ReduceOp.PRODUCT)
    assert np.array_equal(b, np.full(3, float(np.prod([r + 2 for r in range(world)]))))
    c = np.full(2, 1.0 + rank)
    dist.all_reduce(c, op=dist._make_premul_sum(0.5))
    assert np.array_equal(c, np.full(2, sum(0.5 * (1 + r) for r in range(world))))
    with pytest.raises(dist.InvalidArgument):
        dist.all_reduce(np.zeros(2), op=dist.ReduceOp.BAND)  # floats have no bitwise ops


def test_reduce_ops(ranks):
    ranks(2, w_reduce_ops)


def w_p2p(rank, world):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # Blocking ring with tags: even ranks send first.
    out = np.full(5, rank, dtype=np.int64)
    got = np.zeros(5, dtype=np.int64)
    if rank % 2 == 0:
        dist.send(out, nxt, tag=7)
        assert dist.recv(got, prv, tag=7) == prv
    else:
        assert dist.recv(got, prv, tag=7) == prv
        dist.send(out, nxt, tag=7)
    assert np.array_equal(got, np.full(5, prv))
    # isend/irecv with Works.
    r = dist.irecv(got, src=prv, tag=3)
    s = dist.isend(np.full(5, rank * 2, dtype=np.int64), dst=nxt, tag=3)
    assert s.wait() and r.wait(timeout=30)
    assert r.is_completed() and r.is_success() and r.exception() is None
    assert r.source_rank() == prv and np.array_equal(got, np.full(5, prv * 2))
    # Any source: rank 0 receives from everyone else (a tag of its own: the ring below may
    # already be sending to rank 0).
    if rank == 0:
        seen = set()
        for _ in range(world - 1):
            buf = np.zeros(1, dtype=np.int64)
            src = dist.recv(buf, tag=11)
            assert buf[0] == src * 11
            seen.add(src)
        assert seen == set(range(1, world))
    else:
        dist.send(np.array([rank * 11], dtype=np.int64), 0, tag=11)
    # batch_isend_irecv ring (float32).
    a = np.full(4, rank + 0.5, dtype=np.float32)
    b = np.zeros(4, dtype=np.float32)
    ops = [dist.P2POp(dist.isend, a, nxt), dist.P2POp(dist.irecv, b, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert np.array_equal(b, np.full(4, prv + 0.5, dtype=np.float32))
    dist.barrier()


def test_p2p(ranks):
    ranks(3, w_p2p)


def w_async(rank, world):
    a = np.full(8, rank + 1.0)
    w = dist.all_reduce(a, async_op=True)
    assert isinstance(w, dist.Work)
    fut = w.get_future()
    chained = fut.then(lambda f: float(f.value()[0].sum()))
    assert w.wait()
    assert w.is_completed() and w.is_success() and w.exception() is None
    assert np.array_equal(a, np.full(8, sum(r + 1.0 for r in range(world))))
    assert fut.done() and fut.value()[0] is a
    assert chained.wait() == 8 * sum(r + 1.0 for r in range(world))
    lst = [np.zeros(2) for _ in range(world)]
    works = [dist.broadcast(np.full(2, 5.0), src=0, async_op=True),
             dist.all_gather(lst, np.full(2, float(rank)), async_op=True),
             dist.barrier(async_op=True)]
    for w in works:
        w.wait()
    assert [x[0] for x in lst] == [float(r) for r in range(world)]
    # A receive nobody sends: Work.wait(timeout) raises TimeoutError, the op stays pending.
    pending = dist.irecv(np.zeros(1), src=(rank + 1) % world, tag=99)
    with pytest.raises(dist.TimeoutError):
        pending.wait(timeout=0.2)
    assert not pending.is_completed()
    dist.barrier()  # both waits have timed out before anyone sends
    dist.send(np.ones(1), (rank - 1) % world, tag=99)
    pending.wait()


def test_async_work(ranks):
    ranks(2, w_async)
