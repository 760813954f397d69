"""Reference context-parallel (CP) prefill kernels, profiler and cost-model calibration.

Modules (torch-free unless marked):

* ``roofline`` -- cost-model coefficients and memory fields from a model config and a GPU
  datasheet (used by ``cpgym kernels calibrate``; importable by the simulator).
* ``layout`` -- zigzag layout of the new tokens and sharding of the cached prefix over C ranks.
* ``config`` -- geometry of the reference decoder layer.
* ``fit`` -- non-negative relative-error least-squares fit of the cost model (numpy).
* ``attention`` (torch) -- reference attention, position-masked attention with LSE, LSE merge.
* ``cp_attention`` (torch) -- zigzag all-gather-KV and ring pass-KV CP attention on torch.distributed.
* ``layer`` (torch) -- a prefill decoder layer (QKV, RoPE, CP attention, MLP / MoE).
* ``dist`` -- launching a local process group (gloo on CPU, nccl on GPU).
* ``check`` -- the correctness suite (``cpgym kernels check``).
* ``profile`` -- the (R, P, C) profiler and calibration writer (``cpgym profile``).

The package ``__init__`` imports nothing, so ``import kernels_ref.roofline`` stays torch-free.
"""
