"""The model suites' cases by name: which model implementation a step runs, how its kernels are
launched, and which attention the compile suite compiles the model with."""

from __future__ import annotations

# The project's model with each attention implementation (flash_triton: the project's Triton kernel,
# CUDA only), and the plain-PyTorch reference model (torch.nn modules and
# F.scaled_dot_product_attention) that it is measured against.
MODEL_IMPLS = ("naive", "sdpa", "flash_triton", "reference")
# Every implementation but the Triton kernel's, which runs on the CPU only in Triton's interpreter.
CPU_MODEL_IMPLS = ("naive", "sdpa", "reference")
# The compile suite's attention implementations: PyTorch's fused kernel, and the project's Triton
# kernel (registered operators, so the model compiles whole with it: one opaque node per call).
COMPILE_ATTENTIONS = ("sdpa", "flash_triton")
# How a step's kernels are launched: one by one from Python, or by replaying a captured CUDA graph.
LAUNCHES = ("eager", "cuda_graph")
