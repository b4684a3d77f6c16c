"""What ``train.mixed_precision`` means on this machine.

``null`` / ``float32``, ``mixed_float16`` and ``mixed_bfloat16`` are Keras dtype policies and
are used as given. ``auto`` chooses for the hardware the run trains on:

* **GPUs**: ``mixed_bfloat16`` when every visible GPU has compute capability 8.0 or higher
  (Ampere, Hopper and later multiply bfloat16 natively and need no loss scaling), otherwise
  float32.
* **CPU only**: ``mixed_bfloat16`` when the CPU multiplies bfloat16 natively (Linux reports the
  ``avx512_bf16`` or ``amx_bf16`` flag in ``/proc/cpuinfo``), otherwise float32 (emulated
  bfloat16 is slower than float32).

Under ``mixed_bfloat16`` the variables stay float32 (Adam's update and the checkpoints are
float32); layers compute in bfloat16 and the logits and the loss are float32. On a 2-core
AVX512_BF16 CPU it made 1.5x the updates per second of float32 for Transformer-Tiny on Multi30k
and 1.6x for the demo's model.

This module imports TensorFlow only to list GPUs, and only for ``auto``.
"""

from __future__ import annotations

from typing import Optional, Sequence

__all__ = ["AUTO", "NATIVE_BF16_CPU_FLAGS", "cpu_flags", "cpu_has_native_bf16", "resolve_mixed_precision"]

AUTO = "auto"

#: ``/proc/cpuinfo`` flags of x86 CPUs that multiply bfloat16 natively.
NATIVE_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})

#: The lowest GPU compute capability with native bfloat16 matmuls (Ampere).
BF16_GPU_CAPABILITY = (8, 0)


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset:
    """The CPU's feature flags (the first ``flags`` line of Linux's ``/proc/cpuinfo``), or an
    empty set where the file cannot be read or has no such line (other systems)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def cpu_model_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's name (the first ``model name`` line of Linux's ``/proc/cpuinfo``), or ``""``."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU multiplies bfloat16 natively (:data:`NATIVE_BF16_CPU_FLAGS`)."""
    return bool(cpu_flags(cpuinfo) & NATIVE_BF16_CPU_FLAGS)


def _gpu_capabilities() -> list:
    """Compute capabilities of the visible GPUs (``(major, minor)``; ``None`` where unknown)."""
    import tensorflow as tf

    capabilities = []
    for device in tf.config.list_physical_devices("GPU"):
        try:
            capability = tf.config.experimental.get_device_details(device).get("compute_capability")
        except (ValueError, RuntimeError):
            capability = None
        capabilities.append(tuple(capability) if capability else None)
    return capabilities


def resolve_mixed_precision(value: Optional[str], gpus: Optional[Sequence] = None,
                            cpuinfo: str = "/proc/cpuinfo") -> tuple:
    """``(policy, why)``: the Keras dtype policy ``train.mixed_precision = value`` means here
    (``None`` = float32) and a short reason for the log.

    Args:
        value: the config's ``train.mixed_precision``.
        gpus: compute capabilities of the GPUs that will train (``(major, minor)`` or ``None``
            where unknown); ``None`` = ask TensorFlow (only for ``auto``).
        cpuinfo: where the CPU flags are read (only for ``auto`` without GPUs).
    """
    if value != AUTO:
        policy = None if value in (None, "float32") else value
        return policy, "train.mixed_precision"
    if gpus is None:
        gpus = _gpu_capabilities()
    if gpus:
        if all(c is not None and tuple(c) >= BF16_GPU_CAPABILITY for c in gpus):
            return "mixed_bfloat16", "auto: every GPU has compute capability 8.0 or higher"
        return None, "auto: a GPU below compute capability 8.0 (or of unknown capability)"
    if cpu_has_native_bf16(cpuinfo):
        return "mixed_bfloat16", "auto: this CPU multiplies bfloat16 natively (avx512_bf16 / amx_bf16)"
    return None, "auto: this CPU has no native bfloat16 (no avx512_bf16 / amx_bf16 flag)"
