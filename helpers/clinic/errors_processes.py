"""The known device errors of processes (part 2 of the table): DataLoader workers and multiprocessing,
torch.distributed (process groups, NCCL, DDP, the rendezvous port), checkpoints (torch.load, state_dict keys).
"""

from __future__ import annotations

from helpers.clinic.error_entry import PIDS, KnownError, differ_by_prefix, words
from helpers.course.i18n import tr_lazy

PROCESS_ERRORS: tuple[KnownError, ...] = (
    KnownError(
        key="mp-spawn-notebook",
        title=tr_lazy("mp.spawn: process N terminated with exit code 1"),
        patterns=(words("process 0 terminated with exit code 1"),),
        meaning=tr_lazy(
            "A process started by torch.multiprocessing.spawn died before it could report an error. From a "
            "notebook, most often it could not load the function: spawn starts a fresh Python that must import it, "
            "and a function defined in a notebook lives in __main__ (the child says: Can't get attribute '...' on "
            "<module '__main__'>). From a script, the child's own error is printed above this line; a common one is "
            "the script's top-level code, which each child runs again when it imports the script."
        ),
        fix=tr_lazy(
            "From a notebook, put the function in a .py module and import it (mp.spawn(module.train, nprocs=N)), "
            "or write a script and start it with torchrun (also from a cell: !torchrun --nproc_per_node=N "
            "script.py). From a script, read the child's error above this line, and start the processes under the "
            'main guard: if __name__ == "__main__": mp.spawn(train, nprocs=N).'
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 4"),
    ),
    KnownError(
        key="dataloader-worker-notebook",
        title=tr_lazy(
            "DataLoader worker: Can't get attribute '...' on <module '__main__'> (a class the worker cannot import)"
        ),
        patterns=(  # the worker's own error, read in a worker's (spawn's) traceback, in either order
            r"(?s)\A(?=.*Can't get attribute '[^']+' on <module '__(?:mp_)?main__')"
            r"(?=.*(?:spawn\.py|__mp_main__|DataLoader worker|_worker_loop|multiprocessing[/\\]))",
        ),
        meaning=tr_lazy(
            "A worker process died at start. Under 'spawn' (macOS, Windows; Linux from Python 3.14 uses "
            "'forkserver') each worker is a fresh Python that must import the Dataset class. From a notebook it "
            "cannot: a class defined in a notebook lives in __main__ (the worker's own error is in the terminal that "
            "started Jupyter). From a script, the worker imports the script but does not run what sits under its "
            'if __name__ == "__main__": guard, so a class defined there (or inside a function) does not exist for it.'
        ),
        fix=tr_lazy(
            "Define the Dataset class (and a collate_fn, if any) where a worker can import it: from a notebook, in "
            "a .py file next to the notebook, imported; from a script, at the script's top level or in a module it "
            "imports, not under the main guard. Or keep the data as tensors in a TensorDataset; or use num_workers=0."
        ),
        lesson=tr_lazy("notebook 06 (speed), section 3, The notebook pitfall: workers under spawn"),
    ),
    KnownError(
        key="worker-pickle-local",
        title=tr_lazy(
            "Can't pickle local object '...<locals>...' / Can't pickle <function <lambda>> (a worker under spawn)"
        ),
        patterns=(
            words("Can't pickle local object"),
            r"(?i)Can't pickle <function [^>]*<lambda>[^>]*>",  # a lambda: attribute lookup <lambda> on ... failed
            words("Can't get local object"),  # Python 3.14's pickle
            words("Got pickle error when attempting to start a worker Process"),  # torch 2.9+: its warning first
        ),
        meaning=tr_lazy(
            "A new process could not be given a function or class. Under the 'spawn' start method (macOS, Windows; "
            "Linux from Python 3.14 uses 'forkserver', which does the same) the main process pickles what each "
            "child needs, a DataLoader's dataset, its transforms and its collate_fn, or a Process's target. A "
            "pickle stores a function by its importable name, and a lambda, or a function or class defined inside "
            "another function, has none. Under 'fork' (Linux before Python 3.14) nothing is pickled, so the same "
            "code ran there."
        ),
        fix=tr_lazy(
            "Define the function or class at the top level of a module, with a name: in a script, at its top level "
            "(not inside main() and not under the main guard); from a notebook, in a .py file you import. Replace "
            "a lambda with a def at the top level, or functools.partial of one for its arguments. Or use "
            "num_workers=0, which starts no process."
        ),
        lesson=tr_lazy("notebook 09 (the error clinic), section 10"),
    ),
    KnownError(
        key="shm-bus-error",
        title=tr_lazy("DataLoader worker (pid N) is killed by signal: Bus error (out of shared memory)"),
        patterns=(
            words("DataLoader worker (pid 1) is killed by signal: Bus error"),
            words("bus error encountered in worker"),
            words("insufficient shared memory (shm)"),
            words("workers are out of shared memory"),
        ),
        meaning=tr_lazy(
            "Workers hand each batch to the main process through shared memory (/dev/shm), and it ran out: "
            "Docker gives a container 64 MB of it unless told otherwise, and many workers with large batches "
            "(prefetch_factor batches each) fill more."
        ),
        fix=tr_lazy(
            "Give the container more: docker run --shm-size=8g (or --ipc=host); df -h /dev/shm shows the size. Or "
            "keep less in flight: fewer workers, smaller batches, a smaller prefetch_factor; num_workers=0 avoids "
            "shared memory altogether."
        ),
        lesson=tr_lazy("notebook 06 (speed), section 3"),
        shown=False,
    ),
    KnownError(
        key="windows-spawn-main",
        title=tr_lazy(
            "An attempt has been made to start a new process before the current process has finished its "
            "bootstrapping phase"
        ),
        patterns=(  # Python's own multi-line message: any of its lines
            words("An attempt has been made to start a new process before the current process has finished"),
            words("you are not using fork to start your child processes"),
            words("you have forgotten to use the proper idiom in the main module"),  # its second half alone
            words('The "freeze_support()" line can be omitted if the program is not going to be frozen'),
        ),
        meaning=tr_lazy(
            "Where new processes start by 'spawn' (Windows, macOS), each DataLoader worker (num_workers > 0) or "
            "child process is a fresh Python that first imports your script. A script that starts them at its top "
            "level would start them again in every child, so Python stops it."
        ),
        fix=tr_lazy(
            "Put the script's top-level code in a function and call it under the main guard: def main(): ... then "
            'if __name__ == "__main__": main(). Or use num_workers=0.'
        ),
        lesson=tr_lazy("notebook 06 (speed), section 3"),
        shown=False,
    ),
    KnownError(
        key="dataloader-worker-died",
        title=tr_lazy("DataLoader worker (pid(s) ...) exited unexpectedly"),
        patterns=(
            words("DataLoader worker") + PIDS + words("exited unexpectedly"),  # (pid(s) N, M); torch 1.x: (pid N)
            words("DataLoader worker (pid 1) is killed by signal"),
            words("Details are lost due to multiprocessing. Rerunning with num_workers=0"),  # torch 1.x, its end
        ),
        meaning=tr_lazy(
            "A DataLoader worker process died without reporting an error; the main process only sees that it is "
            "gone. The cause is in the worker's own output (the terminal that started Python or Jupyter) or in the "
            "operating system: a Dataset class defined in a notebook that a spawned worker cannot import (Can't get "
            "attribute '...' on <module '__main__'>), no shared memory left (Bus error), no RAM left (Killed), or a "
            "crash in a library the Dataset calls."
        ),
        fix=tr_lazy(
            "Run once with num_workers=0: the Dataset's real error then appears in your own process with a "
            "readable traceback. Then: a class defined in a notebook goes into a .py file you import; a Bus error "
            "needs more shared memory (docker run --shm-size=8g) or fewer workers; Killed needs fewer workers or "
            "smaller batches."
        ),
        lesson=tr_lazy("notebook 06 (speed), section 3, The notebook pitfall: workers under spawn"),
    ),
    KnownError(
        key="ddp-unused-parameters",
        title=tr_lazy("Expected to have finished reduction in the prior iteration"),
        patterns=(
            words("Expected to have finished reduction in the prior iteration"),
            words("your module has parameters that were not used in producing loss"),  # the lines after
            words("which did not receive grad for rank"),
        ),
        meaning=tr_lazy(
            "DistributedDataParallel waits in backward() for a gradient of every parameter; some parameters "
            "did not take part in computing the loss (an unused layer or head), so the previous step never finished."
        ),
        fix=tr_lazy(
            "Remove the unused parameters or freeze them (requires_grad_(False)) before wrapping, or make every "
            "output of forward() feed the loss; else DistributedDataParallel(model, find_unused_parameters=True), "
            "which costs a walk over the graph every step. TORCH_DISTRIBUTED_DEBUG=INFO names the parameters."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 4"),
    ),
    KnownError(
        key="process-group-not-initialized",
        title=tr_lazy("Default process group has not been initialized, please make sure to call init_process_group"),
        patterns=(
            words("Default process group has not been initialized"),
            words("Default process group is not initialized"),  # torch 1.x
        ),
        meaning=tr_lazy(
            "Code that talks to other processes (dist.barrier, all_reduce, get_rank, DistributedSampler without "
            "num_replicas, SyncBatchNorm, DistributedDataParallel) ran in a process where "
            "torch.distributed.init_process_group was never called: usually a training script written for torchrun "
            "started with plain python, or run in a notebook, or a config that asks for distributed training (or "
            "SyncBN) on one GPU."
        ),
        fix=tr_lazy(
            "Start the script with torchrun (torchrun --nproc_per_node=N train.py; from a notebook cell, !torchrun "
            "...), which sets the variables init_process_group(backend) reads, and call init_process_group before "
            "any of these. For a single process, turn distributed training off in the script's options (plain "
            "BatchNorm instead of SyncBatchNorm, no DistributedSampler), or guard the calls with "
            "dist.is_available() and dist.is_initialized()."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 4"),
    ),
    KnownError(
        key="nccl-system-error",
        title=tr_lazy("NCCL error: unhandled system error (ncclSystemError)"),
        patterns=(
            r"(?i:\bNCCL\b).{0,200}?" + words("unhandled system error"),  # NCCL error in: ...NCCL.cpp:N, unhandled ...
            r"ncclSystemError",
        ),
        meaning=tr_lazy(
            "NCCL, the library that moves tensors between GPUs, failed in a call to the operating system while "
            "setting up or running a collective: the processes cannot reach each other over the network interface "
            "it picked, shared memory (/dev/shm) is too small (Docker's default is 64 MB), or the GPUs cannot "
            "talk directly (peer-to-peer) on this machine. The message itself does not say which."
        ),
        fix=tr_lazy(
            "Rerun with the environment variable NCCL_DEBUG=INFO (torchrun passes it to every process): the lines "
            "marked WARN name the failing call. Then, by cause: a container needs more shared memory (docker run "
            "--shm-size=8g or --ipc=host); a machine with several network interfaces needs NCCL_SOCKET_IFNAME set "
            "to the one the nodes share (eth0, ib0); NCCL_P2P_DISABLE=1 or NCCL_IB_DISABLE=1 works around "
            "peer-to-peer or InfiniBand trouble. To tell the script from the machine, run it with the gloo backend."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 4"),
    ),
    KnownError(
        key="nccl-not-built",
        title=tr_lazy("Distributed package doesn't have NCCL built in"),
        patterns=(words("Distributed package doesn't have NCCL"),),
        meaning=tr_lazy(
            "The code asks for the NCCL backend (backend='nccl', or a library's default), and this PyTorch has "
            "none: builds for Windows and macOS never include NCCL, CPU-only builds neither."
        ),
        fix=tr_lazy(
            "Use the gloo backend: dist.init_process_group('gloo'), or choose it from the machine: 'nccl' if "
            "torch.cuda.is_available() and dist.is_nccl_available() else 'gloo'. On Windows, multi-GPU training at "
            "full speed needs Linux (or WSL2)."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 2"),
        shown=False,
    ),
    KnownError(
        key="nccl-no-gpu",
        title=tr_lazy("ProcessGroupNCCL is only supported with GPUs, no GPUs found!"),
        patterns=(words("ProcessGroupNCCL is only supported with GPUs"),),
        meaning=tr_lazy(
            "NCCL connects GPUs, and this process sees none: a machine or a PyTorch build without CUDA, "
            "CUDA_VISIBLE_DEVICES hiding the GPUs, or a driver problem (torch.cuda.is_available() is False)."
        ),
        fix=tr_lazy(
            "Without GPUs use the gloo backend: 'nccl' if torch.cuda.is_available() else 'gloo'. If the machine "
            "has GPUs, python -m helpers doctor shows why PyTorch does not see them."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 2"),
        shown=False,
    ),
    KnownError(
        key="nccl-watchdog-timeout",
        title=tr_lazy("Watchdog caught collective operation timeout: WorkNCCL(...) ran for ... milliseconds"),
        patterns=(
            words("Watchdog caught collective operation timeout"),
            words("ran for 600060 milliseconds before timing out"),
        ),
        meaning=tr_lazy(
            "A collective (an all-reduce in backward(), a broadcast, a barrier) waited longer than the process "
            "group's timeout (Timeout(ms) in the message) for the other ranks, so NCCL's watchdog took the whole "
            "process down. Some rank never got there: it crashed or hung, ran fewer steps (uneven data), or was busy "
            "elsewhere (evaluation or saving on rank 0 only)."
        ),
        fix=tr_lazy(
            "Find the rank that did not arrive: its own first error is in the log (torchrun prints each rank's). "
            "Make every rank run the same collectives in the same order: the same number of batches "
            "(DistributedSampler, drop_last=True) and no collective inside an if rank == 0 branch. For long rank-0 "
            "work between steps, raise the timeout: init_process_group(timeout=datetime.timedelta(minutes=30))."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 4"),
    ),
    KnownError(
        key="port-in-use",
        title=tr_lazy("The server socket has failed to listen on any local network address (address already in use)"),
        patterns=(  # torch 2.x names EADDRINUSE in this message; older releases said "Address already in use"
            words("failed to listen on any local network address"),
            # the same words from a web server or Jupyter are not torch.distributed's
            r"(?s)\A(?=.*[Aa]ddress already in use)(?=.*(?:c10d|TCPStore|torch[./]distributed|DistNetworkError|"
            r"MASTER_PORT|rendezvous|init_process_group|torchrun|server socket|RuntimeError: Address already in use))",
        ),
        meaning=tr_lazy(
            "torch.distributed's rendezvous (a TCP store on MASTER_ADDR:MASTER_PORT, 29500 by default) could not "
            "listen on its port: another job, or an earlier run still alive, holds it."
        ),
        fix=tr_lazy(
            "Choose another port: torchrun --master_port=29501 ... (or MASTER_PORT=29501 in the environment), or "
            "let torchrun --standalone pick a free one; or end the earlier run."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 2"),
        shown=False,
    ),
    KnownError(
        key="cuda-deserialize",
        title=tr_lazy("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False"),
        patterns=(
            words("Attempting to deserialize object on device"),  # on a CUDA device, on CUDA device 1
            words("please use torch.load with map_location ... to map your storages"),  # its end alone
        ),
        meaning=tr_lazy(
            "The checkpoint holds tensors saved from a GPU, and torch.load puts each one back on the device "
            "it was saved from, which this machine lacks (no GPU, or fewer GPUs than the one that saved it)."
        ),
        fix=tr_lazy(
            "Load with map_location: torch.load(path, map_location='cpu') (or map_location=device), then move "
            "the model with model.to(device)."
        ),
        lesson=tr_lazy("notebook 05 (training Tudui), section 9 (checkpoints)"),
    ),
    KnownError(
        key="weights-only",
        title=tr_lazy("UnpicklingError: Weights only load failed"),
        patterns=(
            words("Weights only load failed"),
            words("WeightsUnpickler error"),  # the lines after the first
            words("Unsupported global: GLOBAL"),
            words("we changed the default value of the `weights_only` argument in `torch.load`"),
            words("with `weights_only` set to `False` will likely succeed"),
        ),
        meaning=tr_lazy(
            "torch.load defaults to weights_only=True since PyTorch 2.6: it reads tensors and plain "
            "containers only, and refuses anything else in the file, such as a whole pickled model "
            "(torch.save(model)) or an object of your own class."
        ),
        fix=tr_lazy(
            "Save and load state_dicts: torch.save(model.state_dict(), path), then "
            "model.load_state_dict(torch.load(path, map_location='cpu')). For an old file you trust, "
            "weights_only=False (it can run any code the file holds), or allow its classes with "
            "torch.serialization.add_safe_globals([...])."
        ),
        lesson=tr_lazy("notebook 05 (training Tudui), section 9 (checkpoints)"),
    ),
    KnownError(
        key="pickled-model-main",
        title=tr_lazy(
            "AttributeError: Can't get attribute 'Tudui' on <module '__main__'> (torch.load of a whole model)"
        ),
        patterns=(r"Can't get attribute '[^']+' on <module '__main__'",),
        meaning=tr_lazy(
            "The file holds a whole pickled model (torch.save(model)), and a pickle stores only the class's "
            "name and module: here __main__, the script or notebook that saved it. torch.load in another script or "
            "notebook looks for the class in its own __main__ and does not find it."
        ),
        fix=tr_lazy(
            "Save and load the state_dict instead: torch.save(model.state_dict(), path), then in any script or "
            "notebook model = Tudui() (the class imported from a .py file) and "
            "model.load_state_dict(torch.load(path)). To read an existing file you trust, make the class exist under "
            "that name first (define it in the loading script, or from model import Tudui there), then "
            "torch.load(path, weights_only=False)."
        ),
        lesson=tr_lazy("notebook 05 (training Tudui), section 9 (checkpoints)"),
        shown=False,
    ),
    KnownError(
        key="state-dict-module-prefix",
        title=tr_lazy('load_state_dict: Unexpected key(s) / Missing key(s) starting with "module."'),
        patterns=(r"[\"']module\.[\w.]+[\"']",),  # a key with the prefix; verify compares the keys
        verify=differ_by_prefix("module."),
        meaning=tr_lazy(
            "The keys differ by a 'module.' prefix: the checkpoint was saved from a DataParallel or "
            "DistributedDataParallel wrapper, which keeps the model as .module (or a plain checkpoint was loaded "
            "into a wrapper)."
        ),
        fix=tr_lazy(
            "Strip the prefix before loading: torch.nn.modules.utils.consume_prefix_in_state_dict_if_present"
            "(state, 'module.'), then model.load_state_dict(state). Better, save the model inside the wrapper: "
            "torch.save(wrapped.module.state_dict(), path); load a plain checkpoint into wrapped.module."
        ),
        lesson=tr_lazy("notebook 08 (many devices), section 1"),
    ),
    KnownError(
        key="state-dict-compile-prefix",
        title=tr_lazy('load_state_dict: Unexpected key(s) / Missing key(s) starting with "_orig_mod."'),
        patterns=(r"[\"']_orig_mod\.[\w.]+[\"']",),
        verify=differ_by_prefix("_orig_mod."),
        meaning=tr_lazy(
            "The keys differ by an '_orig_mod.' prefix: the checkpoint was saved from a torch.compile'd "
            "model, which keeps the original as ._orig_mod (or a plain checkpoint was loaded into a compiled one)."
        ),
        fix=tr_lazy(
            "Save the original model: torch.save(model.state_dict(), path) with the model you passed to "
            "torch.compile (compiled._orig_mod). For an existing file: torch.nn.modules.utils."
            "consume_prefix_in_state_dict_if_present(state, '_orig_mod.'), then load."
        ),
        lesson=tr_lazy("notebook 06 (speed), section 4 (torch.compile)"),
    ),
)
