"""Backend selection shared by the RL maths: ``torch`` everywhere, ``triton`` on CUDA.

Triton is optional. It is imported only when a Triton backend is asked for or when
``auto`` sees CUDA tensors, so the torch path works where Triton is not installed.
"""
from __future__ import annotations

import importlib
import importlib.util

import torch

BACKENDS = ("auto", "torch", "triton")

TRITON_PIP_SPEC = 'triton>=3.7; platform_system == "Linux"'


def triton_available() -> bool:
    """True when the ``triton`` package can be imported (it is never imported here)."""
    return importlib.util.find_spec("triton") is not None


def triton_kernels():
    """The kernel module, imported lazily (importing it defines the ``@triton.jit`` kernels)."""
    if not triton_available():
        raise ImportError(
            "backend='triton' needs the triton package, which is not installed; "
            f"install it with: pip install '{TRITON_PIP_SPEC}' (or use backend='torch')"
        )
    return importlib.import_module("curriculum.engine.rl.triton_kernels")


def resolve_backend(backend: str, *tensors: torch.Tensor | None) -> str:
    """Map ``auto``/``torch``/``triton`` to the backend that will run.

    ``auto`` -> ``triton`` when every tensor is on CUDA and Triton is installed, else
    ``torch``. An explicit ``triton`` on CPU tensors is allowed only under
    ``TRITON_INTERPRET=1`` (how the tests run the kernels), otherwise it is an error.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {BACKENDS}")
    on_cuda = all(t.is_cuda for t in tensors if t is not None)
    if backend == "auto":
        return "triton" if on_cuda and triton_available() else "torch"
    if backend == "triton":
        kernels = triton_kernels()
        if not on_cuda and not kernels.INTERPRETED:
            raise ValueError(
                "backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 set before the "
                "kernels are imported, to run them on the CPU interpreter)"
            )
    return backend
