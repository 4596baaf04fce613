"""The check every data-parallel piece makes before its first collective."""

import torch.distributed as dist


def require_process_group(user: str) -> None:
    """RuntimeError unless torch.distributed has a default process group to talk through."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            f"{user} needs torch.distributed to be initialized: call torch.distributed.init_process_group "
            "first (parallel.launch.run_ranks does it in every rank)"
        )
