"""tpcomm: tensorplay.distributed's API over the tpcomm C++ library.

    import tpcomm as dist
    dist.init_process_group()            # env:// (tprun or torchrun set the variables)
    dist.all_reduce(numpy_array)         # in place, no copy

`import tpcomm.torch` registers the torch.distributed backend "tpcomm"."""

from . import _C
from ._errors import (ALL as _ERRORS, AbortedError, ConfigError, Error, InvalidArgument,
                      MismatchError, NotSupportedError, PeerError, StoreError,
                      StoreTimeoutError, TimeoutError, TransportError)

_C._set_error_types(_ERRORS)

from ._api import (Backend, GroupMember, P2POp, ProcessGroup, ReduceOp,  # noqa: E402
                   _make_premul_sum, all_gather, all_gather_into_tensor, all_gather_single,
                   all_reduce, all_reduce_coalesced, all_to_all, all_to_all_single, barrier,
                   batch_isend_irecv, broadcast, destroy_process_group, gather,
                   get_backend, get_global_rank, get_group_rank, get_process_group_ranks,
                   get_rank, get_world_size, group, init_process_group, irecv,
                   is_available, is_gloo_available, is_ibverbs_available, is_initialized,
                   is_mpi_available, is_nccl_available, is_ucx_available, isend,
                   monitored_barrier, new_group, recv, reduce, reduce_scatter,
                   reduce_scatter_single, reduce_scatter_tensor, scatter, send)
from ._extras import (DeviceMesh, average_parameters,  # noqa: E402
                      average_parameters_or_parameter_groups, get_params_to_average, info,
                      init_device_mesh)
from ._objects import (all_gather_object, all_gather_object_enforce_type,  # noqa: E402
                       broadcast_object_list, gather_object, recv_object_list,
                       scatter_object_list, send_object_list)
from ._store import (FileStore, HashStore, PrefixStore, Store, TCPStore,  # noqa: E402
                     register_rendezvous_handler, rendezvous)
from ._work import Future, Work  # noqa: E402

__version__ = "0.1.0"
