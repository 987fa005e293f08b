"""FAKE backend for the engine-plugin tests on CPU: it stands in for arfuse's ArfuseBackend so the
plugins' decision logic (gate, fallback, group bookkeeping, all ranks agree) runs in real gloo
processes without a GPU. It makes NO arfuse call: its "communicator" is a dict, its "fused" call is
gloo's fp32 all-reduce + add + RMSNorm in torch, and it serves a call when tokens <= max_tokens and
hidden and dtype are the communicator's. Tests that need arfuse itself are the test_gpu_* ones."""
from typing import Any, List, Optional, Tuple

from arfuse.integrations._glue import Choice


class FakeBackend:
    name = "FAKE (no arfuse call)"

    def __init__(self, fail_ranks: Tuple[int, ...] = ()):
        self.fail_ranks = fail_ranks
        self.created: List[dict] = []
        self.destroyed: List[dict] = []

    def create(self, cpu_group: Any, max_tokens: int, hidden: int, dtype: Any) -> dict:
        import torch.distributed as dist

        rank = dist.get_rank()
        if rank in self.fail_ranks:
            raise RuntimeError(f"FAKE: rank {rank} was told to fail")
        comm = {"group": cpu_group, "max_tokens": max_tokens, "hidden": hidden, "dtype": dtype}
        self.created.append(comm)
        return comm

    def choose(self, comm: dict, tokens: int, hidden: int, dtype: Any) -> Choice:
        if tokens <= comm["max_tokens"] and hidden == comm["hidden"] and dtype == comm["dtype"]:
            return Choice("arfuse", "FAKE: served")
        return Choice("engine", f"FAKE: tokens={tokens} above {comm['max_tokens']} or another shape")

    def plans(self, comm: dict, tokens: List[int], hidden: int, dtype: Any) -> List[Tuple[int, str]]:
        return [(t, "fake-small" if t <= 4 else "fake-large") for t in tokens]

    def fused(self, comm: dict, x: Any, residual: Any, weight: Any, eps: float) -> Tuple[Any, Any]:
        import torch.distributed as dist

        s = x.float()
        dist.all_reduce(s, group=comm["group"])
        return reference_add_rmsnorm(s, residual, weight, eps)

    def add_rmsnorm(self, x: Any, residual: Any, weight: Any, eps: float) -> Tuple[Any, Any]:
        return reference_add_rmsnorm(x.float(), residual, weight, eps)

    def epilogue(self, comm: dict, x: Any, residual: Any, weight: Any, eps: float, weight_plus_one: bool = False,
                 scale: Any = None) -> Tuple[Any, Any, Any]:
        import torch
        import torch.distributed as dist

        s = x.float()
        dist.all_reduce(s, group=comm["group"])
        w = weight.float() + 1.0 if weight_plus_one else weight
        norm, res = reference_add_rmsnorm(s, residual, w, eps)
        if scale is None:
            return norm.to(x.dtype), res, None
        return None, res, (norm.float() / scale.float()).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)

    def epilogue_nvfp4(self, comm: dict, x: Any, residual: Any, weight: Any, eps: float,
                       global_scale: Any) -> Tuple[Any, Any, Any]:
        """NVFP4, swizzled scales: arfuse's own torch statement of the kernels' formats (_torch_quant)."""
        import torch.distributed as dist

        from arfuse import _torch_quant

        s = x.float()
        dist.all_reduce(s, group=comm["group"])
        norm, res = reference_add_rmsnorm(s, residual, weight, eps)
        hidden = x.shape[-1]
        q, sf = _torch_quant.nvfp4(norm.float().reshape(-1, hidden), global_scale.float(), 1)
        rows = (x.numel() // hidden + 127) // 128 * 128
        return res, q, sf.reshape(rows, -1)

    def describe(self, comm: dict) -> str:
        return "FAKE cpu"

    def destroy(self, comm: dict) -> None:
        self.destroyed.append(comm)


def reference_add_rmsnorm(s: Any, residual: Any, weight: Any, eps: float) -> Tuple[Any, Any]:
    """The header's definition from an fp32 sum: round the residual once, normalise the rounded one."""
    import torch

    res = (residual.float() + s).to(residual.dtype)
    r = res.float()
    norm = (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(residual.dtype)
    return norm, res


def fp64_reference(xs: List[Any], residual: Any, weight: Any, eps: float) -> Tuple[Any, Any]:
    """fp64 reference over every rank's input (xs in rank order)."""
    import torch

    s = sum(x.double() for x in xs)
    r = residual.double() + s
    norm = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    return norm, r


def seeded(rank: Optional[int], tokens: int, hidden: int, dtype: Any, seed: int = 0) -> Tuple[Any, Any, Any]:
    """Fresh random (x of `rank`, residual, weight): residual and weight equal on every rank."""
    import torch

    g = torch.Generator().manual_seed(seed)
    residual = torch.randn(tokens, hidden, generator=g).to(dtype)
    weight = (1 + 0.1 * torch.randn(hidden, generator=g)).to(dtype)
    xs = [torch.randn(tokens, hidden, generator=g).to(dtype) for _ in range(8)]
    return (xs[rank] if rank is not None else xs), residual, weight
