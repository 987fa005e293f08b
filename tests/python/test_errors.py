"""Errors without a GPU, through the real library: names match the library, each failing call raises
the class of its code carrying the library's message, and arguments are checked before any device
is touched."""
import ctypes

import pytest

import arfuse
from arfuse import Algo, DataType, Result

_BUF = ctypes.create_string_buffer(1 << 16)
_BASE = (ctypes.addressof(_BUF) + 15) // 16 * 16  # a 16-byte aligned host address (never written)


def _gpu_visible() -> bool:
    try:
        arfuse.Communicator.init_all([0], max_tokens=1, max_hidden=8)[0].destroy()
        return True
    except arfuse.NoDevice:
        return False


def test_result_names_match_the_library(lib):
    for r in Result:
        assert lib.arfuseGetErrorName(r).decode() == "arfuse" + r.name
    assert lib.arfuseGetErrorName(len(Result)).decode() == "arfuseUnknownResult"


def test_algo_and_dtype_names_match_the_library(lib):
    for a in Algo:
        assert lib.arfuseAlgoName(a).decode() == a.label
        assert Algo.from_label(a.label) is a
    assert lib.arfuseAlgoName(len(Algo)).decode() == "unknown"
    for d in DataType:
        assert lib.arfuseDataTypeName(d).decode() == d.label
    assert [d.itemsize for d in DataType] == [2, 2, 4]


def test_every_code_has_its_class():
    for r in Result:
        if r == Result.Success:
            continue
        cls = arfuse.error_class(r)
        assert issubclass(cls, arfuse.ArfuseError)
        assert cls is not arfuse.ArfuseError, r
    assert arfuse.error_class(Result.InvalidArgument) is arfuse.InvalidArgument
    assert arfuse.error_class(Result.NoDevice) is arfuse.NoDevice
    assert arfuse.error_class(Result.PeerTimeout) is arfuse.PeerTimeout
    assert arfuse.error_class(Result.Unsupported) is arfuse.Unsupported
    assert issubclass(arfuse.InvalidArgument, ValueError)


def _driver_loadable():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_init_without_gpu_raises_no_device():
    if _gpu_visible():
        pytest.skip("a GPU is visible: the no-device path is tested on CPU-only machines")
    with pytest.raises(arfuse.NoDevice) as e:
        arfuse.Communicator.init_all([0, 0])
    err = e.value
    assert err.code == Result.NoDevice and err.name == "arfuseNoDevice"
    assert err.message.startswith("arfuseNoDevice: arfuseCommInitAll: no CUDA device is visible")
    if not _driver_loadable():
        assert "no NVIDIA driver is loaded" in err.message  # not CUDA's "driver version is insufficient"
    assert str(err) == err.message


@pytest.mark.parametrize("kwargs, needle", [
    ({"devices": []}, "arfuseCommInitAll: nranks=0: must be 1..16"),
    ({"devices": [0] * 17}, "nranks=17: must be 1..16"),
    ({"devices": [0, 0], "max_tokens": -5}, "config: maxTokens=-5: must be >= 1 or -1"),
    ({"devices": [0, 0], "max_hidden": 12}, "config: maxHidden=12: must be a positive multiple of 8, or -1"),
    ({"devices": [0, 0], "algo": 42}, "config: algo=42: use -1 or an arfuseAlgo_t"),
    ({"devices": [0, 0], "algo": "local"}, "algo=local is only valid for 1 rank (this group has 2)"),
    ({"devices": [0, 0], "timeout_ms": 0}, "config: timeoutMs=0: must be >= 1 or -1"),
    ({"devices": [0, 0], "max_blocks": 500}, "config: maxBlocks=500: must be 1..128 or -1"),
])
def test_init_argument_errors_name_the_argument(kwargs, needle):
    devices = kwargs.pop("devices")
    with pytest.raises(arfuse.InvalidArgument) as e:
        arfuse.Communicator.init_all(devices, **kwargs)
    assert e.value.code == Result.InvalidArgument
    assert e.value.message.startswith("arfuseInvalidArgument: arfuseCommInitAll: ")
    assert needle in e.value.message


def test_bad_config_struct_is_refused_by_the_library(lib):
    cfg = arfuse.make_config()
    cfg.magic = 0
    with pytest.raises(arfuse.InvalidArgument, match="magic is wrong"):
        arfuse.Communicator.init_all([0], config=cfg)
    cfg = arfuse.make_config()
    cfg.size = 8
    with pytest.raises(arfuse.InvalidArgument, match=r"size=8 is not a known arfuseConfig_t size \(48\)"):
        arfuse.Communicator.init_all([0], config=cfg)
    cfg = arfuse.make_config()
    cfg.version = 20000
    with pytest.raises(arfuse.InvalidArgument, match="version=20000 was compiled against an incompatible arfuse"):
        arfuse.Communicator.init_all([0], config=cfg)
    with pytest.raises(arfuse.InvalidArgument, match="pass either config= or the keyword fields"):
        arfuse.Communicator.init_all([0], config=arfuse.make_config(), max_tokens=4)


def test_python_side_argument_errors():
    with pytest.raises(arfuse.InvalidArgument, match=r"dtypes='int8': arfuse supports bf16, fp16 and fp32"):
        arfuse.make_config(dtypes=["bf16", "int8"])
    with pytest.raises(arfuse.InvalidArgument, match="dtypes is empty"):
        arfuse.make_config(dtypes=[])
    with pytest.raises(arfuse.InvalidArgument, match="max_tokens=1099511627776: does not fit a C int"):
        arfuse.make_config(max_tokens=2 ** 40)
    with pytest.raises(arfuse.InvalidArgument, match=r"algo='fastest': unknown algorithm"):
        arfuse.make_config(algo="fastest")
    with pytest.raises(arfuse.InvalidArgument, match=r"devices\[1\]='1': must be an int"):
        arfuse.Communicator.init_all([0, "1"])
    cfg = arfuse.make_config(dtypes=["bf16", "torch.float32"], algo="oneshot", timeout_ms=500)
    assert (cfg.dtypeMask, cfg.algo, cfg.timeoutMs) == (0b101, int(Algo.OneShot), 500)


def _fused_args(tokens=2, hidden=64, itemsize=2):
    nbytes = tokens * hidden * itemsize
    x, res, w, norm, rout = (_BASE + i * nbytes for i in range(5))
    return [x, res, w, 1e-6, norm, rout, tokens, hidden, DataType.Bfloat16]


@pytest.mark.parametrize("change, needle", [
    ({0: None}, "arfuseAddRmsNorm: x is NULL: pass a device pointer"),
    ({2: None}, "weight is NULL"),
    ({0: _BASE + 2}, f"x={hex(_BASE + 2)} is not 16-byte aligned"),
    ({5: _BASE + 8 * 256 + 4}, "residual_out="),
    ({3: 0.0}, "eps=0: must be finite and > 0"),
    ({3: float("nan")}, "eps=nan: must be finite and > 0"),
    ({7: 60}, "hidden=60"),
    ({6: 0}, "tokens=0"),
    ({4: _BASE + 256}, "overlap"),
])
def test_add_rmsnorm_checks_before_touching_a_device(change, needle):
    args = _fused_args()
    for i, v in change.items():
        args[i] = v
    with pytest.raises(arfuse.InvalidArgument) as e:
        arfuse.add_rmsnorm(*args)
    assert needle in e.value.message, e.value.message
    assert e.value.message.startswith("arfuseInvalidArgument: arfuseAddRmsNorm: ")


def test_add_rmsnorm_unsupported_hidden_names_the_limit():
    args = _fused_args(tokens=1, hidden=8)
    args[7] = 40000
    with pytest.raises(arfuse.Unsupported, match="largest supported hidden size"):
        arfuse.add_rmsnorm(*args)


def test_add_rmsnorm_valid_arguments_reach_the_device_check():
    if _gpu_visible():
        pytest.skip("a GPU is visible: host memory is refused by the pointer check instead")
    # Every argument passed its checks; only then is the device asked for. The library reports
    # NoDevice for cudaErrorNoDevice and CudaError for other failures (e.g. no driver at all).
    with pytest.raises((arfuse.NoDevice, arfuse.CudaError), match="arfuseAddRmsNorm: no usable current CUDA device"):
        arfuse.add_rmsnorm(*_fused_args())


def test_pointer_like_objects_are_passed_through():
    class CudaArray:  # __cuda_array_interface__ (CuPy, Numba, ...)
        __cuda_array_interface__ = {"data": (_BASE + 2, False), "shape": (2, 64), "typestr": "<f2", "version": 3}

    class Tensorish:  # anything with data_ptr() (torch)
        def data_ptr(self):
            return _BASE + 4

    for obj, addr in ((CudaArray(), _BASE + 2), (Tensorish(), _BASE + 4), (ctypes.c_void_p(_BASE + 6), _BASE + 6)):
        args = _fused_args()
        args[0] = obj
        with pytest.raises(arfuse.InvalidArgument, match=f"x={hex(addr)} is not 16-byte aligned"):
            arfuse.add_rmsnorm(*args)
    args = _fused_args()
    args[1] = "0x1000"
    with pytest.raises(arfuse.InvalidArgument, match="residual_in: str is not a pointer"):
        arfuse.add_rmsnorm(*args)
    with pytest.raises(arfuse.InvalidArgument, match="dtype='fp8'"):
        arfuse.add_rmsnorm(*_fused_args()[:8], "fp8")
    with pytest.raises(arfuse.InvalidArgument, match="stream: str is not a CUDA stream"):
        arfuse.add_rmsnorm(*_fused_args(), stream="default")


def test_fake_handle_is_refused_without_dereferencing():
    fake = arfuse.Communicator._adopt(_BASE + 32)
    with pytest.raises(arfuse.InvalidUsage) as e:
        fake.rank
    assert "arfuseCommRank: comm=" in e.value.message
    assert "is not a live arfuse communicator (destroyed, or not from arfuseCommInitAll)" in e.value.message
    with pytest.raises(arfuse.InvalidUsage, match="arfuseCommQueryPlan: comm=.* is not a live"):
        fake.query_plan("all_reduce", 1, 8, "bf16")
    with pytest.raises(arfuse.InvalidUsage, match="arfuseAllReduce: comm=.* is not a live"):
        fake.all_reduce(_BASE, _BASE, 1, 8, DataType.Bfloat16)
    with pytest.raises(arfuse.InvalidUsage, match="arfuseCommGetAsyncError: comm="):
        fake.async_error()
    assert arfuse.Communicator.from_id(fake.id) is fake
    with pytest.raises(arfuse.InvalidUsage, match="arfuseCommDestroy: comm=.* is not a live"):
        fake.destroy()
    # Destroy forgot the handle before calling the library: never passed twice, later calls say so.
    assert fake.destroyed
    fake.destroy()
    with pytest.raises(arfuse.InvalidUsage, match=f"communicator id={fake.id} was destroyed"):
        fake.rank
    with pytest.raises(arfuse.InvalidArgument, match=f"comm_id={fake.id}: no live arfuse Communicator"):
        arfuse.Communicator.from_id(fake.id)
    assert "destroyed" in repr(fake)


def test_null_handle_is_invalid_argument():
    null = arfuse.Communicator._adopt(0)
    with pytest.raises(arfuse.InvalidArgument, match="arfuseCommCount: comm is NULL"):
        null.nranks
    null._handle = None  # never hand NULL to destroy


def test_communicators_are_not_constructed_directly():
    with pytest.raises(TypeError, match="init_all"):
        arfuse.Communicator(1234)


def test_group_nests_and_end_without_start_is_invalid_usage(lib):
    with arfuse.group():
        with arfuse.group():
            pass
    with pytest.raises(arfuse.InvalidUsage, match="arfuseGroupEnd without a matching arfuseGroupStart"):
        lib.check(lib.arfuseGroupEnd())
    with pytest.raises(KeyError):
        with arfuse.group():
            raise KeyError("the body's error wins")
    with pytest.raises(arfuse.InvalidUsage):  # and the group was still closed
        lib.check(lib.arfuseGroupEnd())


def test_errors_pickle_with_their_class():
    import pickle

    err = arfuse.PeerTimeout(Result.PeerTimeout, "arfusePeerTimeout", "arfusePeerTimeout: rank 1 waited 10000 ms")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is arfuse.PeerTimeout
    assert (back.code, back.name, back.message) == (err.code, err.name, err.message)
