"""Flow primitives around the kernel, one module each, plugged in through ``loom.kernel.primitive``."""
