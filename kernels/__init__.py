"""Triton kernels of the training stack, each with a plain PyTorch reference beside it."""
