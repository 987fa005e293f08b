"""arfuse.torch without a GPU: the ops are registered, dtypes map, tensors are checked with clear
errors (CPU tensors, shapes, dtypes, unknown communicator ids), the fake implementation works on
meta tensors. Skipped with a printed reason when torch is not installed."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: arfuse.torch tests need it (pip install torch)")

import arfuse  # noqa: E402
import arfuse.torch as at  # noqa: E402
from arfuse import DataType  # noqa: E402


def _fused(device, dtype=torch.bfloat16, tokens=4, hidden=64):
    x = torch.zeros(tokens, hidden, dtype=dtype, device=device)
    return [x, torch.zeros_like(x), torch.ones(hidden, dtype=dtype, device=device), torch.empty_like(x),
            torch.empty_like(x)]


def test_ops_are_registered():
    for name in ("all_reduce", "all_reduce_add_rmsnorm", "add_rmsnorm"):
        assert hasattr(torch.ops.arfuse, name)
    schema = str(torch.ops.arfuse.all_reduce_add_rmsnorm.default._schema)
    assert "Tensor(a!) norm_out" in schema and "Tensor(b!) residual_out" in schema and "int comm_id" in schema
    assert arfuse.torch is at  # the lazy attribute is the module


def test_dtype_mapping():
    assert at.to_dtype(torch.bfloat16) is DataType.Bfloat16
    assert at.to_dtype(torch.float16) is DataType.Float16
    assert at.to_dtype(torch.float32) is DataType.Float32
    with pytest.raises(arfuse.InvalidArgument, match="torch.float64: arfuse supports"):
        at.to_dtype(torch.float64)
    assert arfuse.make_config(dtypes=[torch.bfloat16, torch.float16]).dtypeMask == 0b011


def test_cpu_tensors_are_refused():
    with pytest.raises(arfuse.InvalidArgument, match="arfuse::add_rmsnorm: x is on cpu: arfuse needs CUDA tensors"):
        at.add_rmsnorm(*_fused("cpu")[:3], 1e-6)


def test_unknown_communicator_id_is_refused():
    with pytest.raises(arfuse.InvalidArgument, match="comm_id=987654: no live arfuse Communicator"):
        torch.ops.arfuse.all_reduce(987654, torch.zeros(8), torch.zeros(8))
    with pytest.raises(arfuse.InvalidArgument, match="comm: expected an arfuse.Communicator or its .id"):
        at.all_reduce("rank0", torch.zeros(8))


def test_destroyed_communicator_is_refused():
    fake = arfuse.Communicator._adopt(0x1000)
    fake._handle = None  # as after destroy()
    with pytest.raises(arfuse.InvalidUsage, match="was destroyed"):
        at.all_reduce(fake, torch.zeros(8))


def test_fake_implementation_checks_shapes_on_meta_tensors():
    x, res, w, norm, rout = _fused("meta")
    assert torch.ops.arfuse.all_reduce_add_rmsnorm(1, x, res, w, 1e-6, norm, rout) is None
    with pytest.raises(arfuse.InvalidArgument, match=r"weight has shape \(32,\), expected \(64,\)"):
        torch.ops.arfuse.all_reduce_add_rmsnorm(1, x, res, w[:32], 1e-6, norm, rout)
    with pytest.raises(arfuse.InvalidArgument, match="residual_in is torch.float16 but x is torch.bfloat16"):
        torch.ops.arfuse.all_reduce_add_rmsnorm(1, x, res.half(), w, 1e-6, norm, rout)
    with pytest.raises(arfuse.InvalidArgument, match="norm_out is not contiguous"):
        torch.ops.arfuse.all_reduce_add_rmsnorm(1, x, res, w, 1e-6, torch.empty(64, 4, dtype=x.dtype,
                                                                                   device="meta").t(), rout)
    assert torch.ops.arfuse.all_reduce(1, x, torch.empty_like(x)) is None
