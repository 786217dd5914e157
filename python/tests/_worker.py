"""One rank of a run_ranks job: imports the test module, initializes tpcomm (env://) unless
told not to, runs fn(rank, world_size, *args), destroys the group."""

import importlib.util
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
path, name, args, init = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4] == "1"
modname = os.path.splitext(os.path.basename(path))[0]
spec = importlib.util.spec_from_file_location(modname, path)
mod = importlib.util.module_from_spec(spec)
sys.modules[modname] = mod  # pickle finds the module's classes by name
spec.loader.exec_module(mod)

import tpcomm  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if init:
    tpcomm.init_process_group()
getattr(mod, name)(rank, world, *args)
if init and tpcomm.is_initialized():
    tpcomm.destroy_process_group()
print("WORKER-OK", flush=True)
