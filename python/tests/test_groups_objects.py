"""Groups, DeviceMesh, object collectives, averaging, monitored_barrier, error cases,
Ctrl-C, torch tensors through the tpcomm API."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import tpcomm as dist


def w_groups(rank, world):
    assert dist.get_rank() == rank and dist.get_world_size() == world
    assert dist.get_backend() == "auto"
    evens = dist.new_group([2, 0])
    odds = dist.new_group([1, 3])
    mine, other = (evens, odds) if rank % 2 == 0 else (odds, evens)
    assert dist.get_process_group_ranks(mine) == ([0, 2] if rank % 2 == 0 else [1, 3])
    assert dist.get_rank(mine) == rank // 2 and dist.get_world_size(mine) == 2
    assert dist.get_rank(other) == -1 and dist.get_world_size(other) == -1
    assert dist.get_group_rank(mine, rank) == rank // 2
    assert dist.get_global_rank(mine, 1) == (2 if rank % 2 == 0 else 3)
    a = np.array([rank], dtype=np.int64)
    dist.all_reduce(a, group=mine)
    assert a[0] == (2 if rank % 2 == 0 else 4)
    b = np.zeros(1, dtype=np.int64)
    # Roots are global ranks in the free functions, group ranks through group_src.
    b[0] = rank
    dist.broadcast(b, src=3 if rank % 2 else 2, group=mine)
    assert b[0] == (3 if rank % 2 else 2)
    b[0] = rank
    dist.broadcast(b, group=mine, group_src=0)
    assert b[0] == rank % 2
    with pytest.raises(dist.InvalidArgument):
        dist.broadcast(b, src=rank ^ 1, group=mine)  # not a member of this group
    with pytest.raises(dist.InvalidArgument):
        dist.all_reduce(a, group=other)  # this rank is not a member
    dist.barrier(group=mine)
    dist.destroy_process_group(mine)
    whole = dist.new_group()
    dist.barrier(group=whole)
    # info(): the transport of every link and why, beside tpinfo's report.
    d = dist.info()
    assert d["process_group"] == {"rank": rank, "world_size": world, "backend": "auto",
                                  "group_name": d["process_group"]["group_name"]}
    assert sorted(link["peer"] for link in d["links"]) == [p for p in range(world) if p != rank]
    assert all(link["transport"] == "shm" and link["reason"] for link in d["links"]), d["links"]


def test_groups(ranks):
    ranks(4, w_groups)


def w_mesh(rank, world):
    mesh = dist.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    assert mesh.shape == [2, 2] and mesh.ndim == 2 and mesh.mesh == [0, 1, 2, 3]
    assert mesh.get_coordinate() == [rank // 2, rank % 2]
    assert mesh.get_local_rank("dp") == rank // 2 and mesh.get_local_rank(1) == rank % 2
    assert mesh.size() == 4 and mesh.size("tp") == 2
    a = np.array([rank], dtype=np.int32)
    dist.all_reduce(a, group=mesh.get_group("dp"))
    assert a[0] == (rank % 2) * 2 + 2  # ranks {0,2} or {1,3}
    b = np.array([rank], dtype=np.int32)
    dist.all_reduce(b, group=mesh.get_group("tp"))
    assert b[0] == (rank // 2) * 4 + 1
    sub = mesh["tp"]
    assert sub.ndim == 1 and sub.get_local_rank() == rank % 2
    with pytest.raises(dist.InvalidArgument, match="dp"):
        mesh.get_group("nope")
    with pytest.raises(dist.InvalidArgument):
        dist.init_device_mesh("cpu", (3, 2))


def test_device_mesh(ranks):
    ranks(4, w_mesh)


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, o):
        return isinstance(o, Point) and (self.x, self.y) == (o.x, o.y)


def _obj(r):
    return {"rank": r, "nested": [1, (2.5, "three"), {"set": {r, r + 1}}], "pt": Point(r, -r),
            "blob": bytes(range(r * 50 % 256)) * 40, "none": None}


def w_objects(rank, world):
    out = [None] * world
    dist.all_gather_object(out, _obj(rank))
    assert out == [_obj(r) for r in range(world)]
    lst = [_obj(7), "x", 3] if rank == 1 else [None, None, None]
    dist.broadcast_object_list(lst, src=1)
    assert lst == [_obj(7), "x", 3]
    gl = [None] * world if rank == 0 else None
    dist.gather_object(_obj(rank), gl, dst=0)
    if rank == 0:
        assert gl == [_obj(r) for r in range(world)]
    o = [None]
    dist.scatter_object_list(o, [_obj(10 + r) for r in range(world)] if rank == 0 else None,
                             src=0)
    assert o == [_obj(10 + rank)]
    if rank == 0:
        dist.send_object_list([_obj(1), [2, 3]], dst=1)
    elif rank == 1:
        got = [None, None]
        assert dist.recv_object_list(got, src=0) == 0
        assert got == [_obj(1), [2, 3]]
        dist.send_object_list(["any"], dst=0)
    if rank == 0:
        got = [None]
        assert dist.recv_object_list(got) == 1 and got == ["any"]
    # enforce_type: the same type passes; another type on one rank fails on every rank.
    out = [None] * world
    dist.all_gather_object_enforce_type(None, out, rank * 1.5)
    assert out == [r * 1.5 for r in range(world)]
    with pytest.raises(TypeError, match="ranks 1 have 'builtins.str'"):
        dist.all_gather_object_enforce_type(None, out, "one" if rank == 1 else 1.0)
    with pytest.raises(TypeError, match="rank 1"):
        dist.all_gather_object_enforce_type(None, out, Point(0, 0) if rank == 1 else 2,
                                            type_checker=lambda a, b: type(a) is type(b))
    with pytest.raises(ValueError, match="group size"):
        dist.all_gather_object([None], 1)  # wrong list length: refused before communicating


def test_object_collectives(ranks):
    ranks(3, w_objects)


def w_average(rank, world):
    w = np.full((2, 3), rank + 1.0, dtype=np.float32)
    b = np.full(2, rank * 2.0, dtype=np.float64)
    dist.average_parameters([w, b])
    assert np.array_equal(w, np.full((2, 3), (world + 1) / 2, dtype=np.float32))
    assert np.array_equal(b, np.full(2, float(world - 1)))
    import torch

    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.fill_(rank)
        lin.bias.fill_(10.0 * rank)
    lin.weight.grad = torch.zeros_like(lin.weight)  # bias has no grad: left alone
    assert dist.get_params_to_average(lin.parameters()) == [lin.weight]
    dist.average_parameters_or_parameter_groups(list(lin.parameters()))
    assert torch.equal(lin.weight, torch.full((2, 3), (world - 1) / 2))
    assert torch.equal(lin.bias, torch.full((2,), 10.0 * rank))


def test_average_parameters(ranks):
    ranks(2, w_average)


def w_monitored(rank, world, skip):
    if rank == skip:
        time.sleep(1.5)
        return
    if rank == 0:
        with pytest.raises(dist.TimeoutError, match=f"rank {skip} did not reach"):
            dist.monitored_barrier(timeout=0.5)
    else:
        # Never released: a timeout, or rank 0's exit after its own timeout.
        with pytest.raises((dist.TimeoutError, dist.PeerError)):
            dist.monitored_barrier(timeout=1.0)


def w_monitored_ok(rank, world):
    dist.monitored_barrier(timeout=30)
    dist.monitored_barrier(wait_all_ranks=True)


def test_monitored_barrier(ranks):
    ranks(3, w_monitored_ok)
    ranks(3, w_monitored, 2)


def w_errors(rank, world):
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises(dist.InvalidArgument, match="read-only") as e:
        dist.all_reduce(ro)
    assert e.value.rank == rank and e.value.op == "all_reduce"
    with pytest.raises(dist.InvalidArgument, match="not contiguous"):
        dist.broadcast(np.zeros((4, 4))[:, 0], src=0)
    with pytest.raises(dist.InvalidArgument, match="complex128"):
        dist.all_reduce(np.zeros(2, dtype=np.complex128))
    with pytest.raises(dist.InvalidArgument):
        dist.all_gather([np.zeros(2)], np.zeros(2))  # one output for two ranks
    with pytest.raises(dist.InvalidArgument):
        dist.all_gather_into_tensor(np.zeros(3), np.zeros(2))
    with pytest.raises(dist.InvalidArgument):
        dist.send(np.zeros(1), dst=world + 5)
    with pytest.raises(TypeError):
        dist.all_reduce(np.zeros(1), op="sum")
    with pytest.raises(ValueError):
        dist.P2POp(dist.all_reduce, np.zeros(1), 0)
    with pytest.raises(ValueError):
        dist.gather(np.zeros(1), None, dst=rank)  # the destination needs a list
    # Nothing above communicated: the group still works.
    a = np.ones(1)
    dist.all_reduce(a)
    assert a[0] == world


def test_argument_errors(ranks):
    ranks(2, w_errors)


def w_peer_dies(rank, world):
    if rank == 1:
        dist.barrier()
        os._exit(0)  # gone without a word
    dist.barrier()
    with pytest.raises(dist.Error) as e:
        dist.recv(np.zeros(1), src=1)
    assert "1" in str(e.value) and e.value.op == "recv" and e.value.rank == 0
    print("ERROR:", type(e.value).__name__, e.value)


def test_peer_failure_is_an_exception_naming_the_peer(ranks):
    job = ranks(2, w_peer_dies, init=True, env={"TPCOMM_TIMEOUT": "20s"})
    assert "ERROR:" in job.outputs[0]


def w_ctrl_c(rank, world):
    if rank == 0:
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        t = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            dist.recv(np.zeros(1), src=1, tag=5)  # rank 1 sends only after this is cut
        assert time.monotonic() - t < 10
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            dist.barrier(group=dist.new_group([0, 1]))  # rank 1 is not in it yet
        dist.send(np.ones(1), 1, tag=6)
    else:
        dist.recv(np.zeros(1), src=0, tag=6)
        dist.new_group([0, 1])


def test_ctrl_c_interrupts_a_wait(ranks):
    ranks(2, w_ctrl_c)


def w_torch(rank, world):
    import torch

    t = torch.full((3, 2), float(rank + 1))
    ptr = t.data_ptr()
    dist.all_reduce(t)
    assert t.data_ptr() == ptr and torch.equal(t, torch.full((3, 2), 3.0))
    outs = [torch.zeros(2, dtype=torch.bfloat16) for _ in range(world)]
    dist.all_gather(outs, torch.full((2,), rank + 0.5, dtype=torch.bfloat16))
    assert [o[0].item() for o in outs] == [0.5, 1.5]
    with pytest.raises(dist.InvalidArgument, match="not contiguous"):
        dist.all_reduce(torch.zeros(4, 4).t())


def test_torch_tensors(ranks):
    ranks(2, w_torch)
