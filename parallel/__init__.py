"""Training-side parallelism.

- `parallel.ddp`: four data-parallel wrappers (DDPNaive, DDPFlat, DDPIndividualParameters,
  DDPBucketed) that average gradients across ranks;
- `parallel.sharded_optimizer`: ShardedOptimizer, optimizer state split across ranks;
- `parallel.launch`: run a function on several ranks, one process each, with a timeout;
- `parallel.launched`: join the process group of a launcher's job (torchrun, srun) and run a
  function in every rank under a watchdog;
- `parallel.process_group`: the check that torch.distributed is initialized.
"""
